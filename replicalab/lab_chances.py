"""Where a Lab Manager's reply can change what the episode pays: its turns at which the lab's own check finds the
current protocol infeasible.

At such a turn accepting ends nothing (the env agrees only to a feasible plan) and what pays is a repair the
Scientist can take: a technique and the items a feasible plan needs.  At a turn whose plan passes every check the
lab's best move is to accept, whatever it writes otherwise; a group of replies branched there holds one decision.
``repair_chances(log)`` replays the log's turns through the env (pure and deterministic) to read each Lab Manager
view's ``plan_check``.
"""

from __future__ import annotations

from replicalab.env import ReplicaLabEnv
from replicalab.episode import logged_action
from replicalab.models import EpisodeLog, LabManagerObservation


def plan_fails_check(observation: LabManagerObservation) -> bool:
    """The view holds a protocol and the lab's check fails it on at least one flag."""
    return observation.current_protocol is not None and any(observation.plan_check.values())


def repair_chances(log: EpisodeLog) -> list[int]:
    """The indices, among the episode's Lab Manager turns, of the turns whose current protocol fails the lab's
    check, in turn order."""
    env = ReplicaLabEnv(max_rounds=log.max_rounds)
    obs = env.reset(log.seed, log.scenario_template, log.difficulty)
    out: list[int] = []
    own_turns = 0
    for turn in log.turns:
        if turn.role == "lab_manager" and obs is not None and obs.lab_manager is not None:
            if plan_fails_check(obs.lab_manager):
                out.append(own_turns)
            own_turns += 1
        result = env.step(logged_action(turn))
        if result.done:
            break
        obs = result.observation
    return out
