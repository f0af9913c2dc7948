"""The one loop that joins the env and agents.

``episode_loop`` is a generator: it calls callable seats itself (a Lab Manager seat given as a scripted
policy name, or None for the default one, is built for the episode's scenario) and, for a seat set to ``EXTERNAL``,
yields a ``TurnRequest`` and waits for the action to be sent back.  ``run_episode`` drives it with
callables only; batched drivers (training) drive many loops at once and answer all pending requests
of a model with one batched generation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Generator, Iterator, Union

from replicalab.env import ReplicaLabEnv
from replicalab.lab import DEFAULT_LAB_POLICY, LAB_POLICIES, ScriptedLabManager
from replicalab.models import (
    EpisodeLog,
    InvalidAction,
    LabManagerAction,
    LabManagerObservation,
    ScientistAction,
    ScientistObservation,
    TurnRecord,
)

Action = Union[ScientistAction, LabManagerAction, InvalidAction]
Agent = Callable[[Union[ScientistObservation, LabManagerObservation]], Action]
EXTERNAL = "external"  # a seat whose actions are sent into ``episode_loop`` from outside


@dataclass(frozen=True)
class TurnRequest:
    role: str
    observation: ScientistObservation | LabManagerObservation


def episode_loop(
    env: ReplicaLabEnv, scientist, lab_manager=None, *, seed: int, template: str, difficulty: str
) -> Generator[TurnRequest, Action, EpisodeLog]:
    obs = env.reset(seed, template, difficulty)
    if lab_manager is None or lab_manager in LAB_POLICIES:
        lab_manager = ScriptedLabManager(env.scenario, lab_manager or DEFAULT_LAB_POLICY, env.feasibility)
    seats = {"scientist": scientist, "lab_manager": lab_manager}
    while True:
        role = env.current_role
        view = obs.scientist if role == "scientist" else obs.lab_manager
        seat = seats[role]
        if seat == EXTERNAL:
            action = yield TurnRequest(role, view)
        else:
            action = seat(view)
        result = env.step(action)
        if result.done:
            return env.episode_log()
        obs = result.observation


def run_episode(
    env: ReplicaLabEnv, scientist: Agent, lab_manager: Agent | None = None, *,
    seed: int, template: str, difficulty: str,
) -> EpisodeLog:
    """Play one episode.  ``lab_manager`` is an agent, the name of a scripted Lab Manager policy
    (``LAB_POLICIES``), or None for the default one (``DEFAULT_LAB_POLICY``)."""
    if scientist == EXTERNAL or lab_manager == EXTERNAL:
        raise ValueError("run_episode needs callable seats; drive episode_loop for external seats")
    loop = episode_loop(env, scientist, lab_manager, seed=seed, template=template, difficulty=difficulty)
    try:
        next(loop)
    except StopIteration as stop:
        return stop.value
    raise AssertionError("unreachable: no external seat")


def replay_episode(log: EpisodeLog) -> EpisodeLog:
    """Re-run the recorded turns of ``log`` and return the fresh EpisodeLog (it equals ``log``)."""
    env = ReplicaLabEnv(max_rounds=log.max_rounds)
    env.reset(log.seed, log.scenario_template, log.difficulty)
    for turn in log.turns:
        env.step(logged_action(turn))
    return env.episode_log()


def replayed_views(log: EpisodeLog) -> Iterator[tuple[TurnRecord, ScientistObservation | LabManagerObservation]]:
    """Each recorded turn of ``log`` with the view its role acted on, replayed through the env (pure and
    deterministic), up to the turn that ended the episode."""
    env = ReplicaLabEnv(max_rounds=log.max_rounds)
    obs = env.reset(log.seed, log.scenario_template, log.difficulty)
    for turn in log.turns:
        yield turn, obs.scientist if turn.role == "scientist" else obs.lab_manager
        result = env.step(logged_action(turn))
        if result.done:
            return
        obs = result.observation


def logged_action(turn: TurnRecord) -> Action:
    """The action a recorded turn sent to the env (an ``InvalidAction`` for a turn that did not parse)."""
    if turn.action is None:
        return InvalidAction(role=turn.role, error=turn.error or "invalid turn", raw_text=turn.raw_text)
    if turn.role == "scientist":
        return ScientistAction.model_validate(turn.action)
    return LabManagerAction.model_validate(turn.action)
