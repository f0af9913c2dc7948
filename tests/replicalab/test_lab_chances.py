"""``repair_chances``: the Lab Manager turns whose current plan fails the lab's check, read by replaying the log."""

from __future__ import annotations

from replicalab import ReplicaLabEnv, run_episode
from replicalab.agents import SkilledScientist
from replicalab.episode import logged_action
from replicalab.lab_chances import plan_fails_check, repair_chances
from replicalab.scenarios import cells


def _lab_views(log):
    """Every Lab Manager view of the episode, in turn order (the check the chances read, seen independently)."""
    env = ReplicaLabEnv(max_rounds=log.max_rounds)
    obs = env.reset(log.seed, log.scenario_template, log.difficulty)
    views = []
    for turn in log.turns:
        if turn.role == "lab_manager":
            views.append(obs.lab_manager)
        result = env.step(logged_action(turn))
        if result.done:
            break
        obs = result.observation
    return views


def test_a_chance_is_exactly_a_lab_turn_whose_plan_fails_a_check() -> None:
    seen_both = False
    for template, difficulty in cells():
        for seed in range(3):
            for scientist in (SkilledScientist(), SkilledScientist(["read", "defend", "ask"])):
                log = run_episode(ReplicaLabEnv(), scientist, seed=seed, template=template, difficulty=difficulty)
                views = _lab_views(log)
                chances = repair_chances(log)
                assert chances == sorted(set(chances)) and all(0 <= t < len(views) for t in chances)
                for index, view in enumerate(views):
                    failing = view.current_protocol is not None and any(view.plan_check.values())
                    assert (index in chances) == failing == plan_fails_check(view)
                seen_both |= bool(chances) and len(chances) < len(views)
    assert seen_both, "no episode held both a failing and a passing plan at the lab's turns"
