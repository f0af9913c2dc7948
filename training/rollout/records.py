"""Typed, picklable records that cross the rollout boundary (workers -> driver -> trainer)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Iterable, Mapping, Sequence

from replicalab.models import EpisodeLog
from replicalab.scenarios import cells
from replicalab.seats import AgentRole
from replicalab.seeds import split_seeds


@dataclass(frozen=True)
class ModelTurn:
    """One reply a model seat generated: its role, tokens, their log-probs, text and whether it stopped."""

    role: AgentRole
    completion_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    text: str
    finished: bool = True


@dataclass(frozen=True)
class EpisodeJob:
    """One episode to play.  ``role`` is the seat whose trajectory is wanted; ``group`` is the GRPO
    group (same seed, role and opponent); ``job_id`` is unique within a rollout step; ``opponent`` is the
    seat spec of the other role for this episode (drawn from an opponent pool; ``""``: the spec's seat).

    A branch job (``training.rollout.branch``) replays ``prefix``, the model turns of another episode of the same
    seed and seats, and samples from there: its trajectory starts at ``role``'s reply after the prefix (the
    prefix is part of its prompt), and holds only that reply when ``reply_only``.  ``branch`` names the group's
    kind (``""``: a whole episode; a skill's name: branched at that skill's chance; ``turn``: at another turn)."""

    job_id: int
    seed: int
    template: str
    difficulty: str
    role: AgentRole
    group: int = 0
    opponent: str = ""
    prefix: tuple[ModelTurn, ...] = ()
    branch: str = ""
    reply_only: bool = False
    #: The branched reply's sampling temperature (None: the collect's).
    reply_temperature: float | None = None


def episode_jobs(cells: Sequence[tuple[str, str]], seeds: Iterable[int], role: AgentRole = "scientist",
                 limit: int | None = None) -> list[EpisodeJob]:
    """The one builder of job lists: every seed x (template, difficulty) cell, seeds outermost (so the first
    ``k * len(cells)`` jobs cover every cell ``k`` times), job ids in order, at most ``limit`` jobs."""
    grid = [(seed, t, d) for seed in seeds for t, d in cells]
    return [EpisodeJob(job_id=i, seed=s, template=t, difficulty=d, role=role)
            for i, (s, t, d) in enumerate(grid[:limit])]


def validation_slice(episodes: int, templates: Sequence[str], difficulties: Sequence[str]) -> list[EpisodeJob]:
    """``episodes`` Scientist jobs spread over the cells, from the start of VALIDATION_SEEDS (the periodic
    check during training; never a test seed)."""
    grid = cells(templates, difficulties)
    return episode_jobs(grid, split_seeds("validation", -(-episodes // len(grid))), limit=episodes)


def validation_jobs(episodes: int, templates: Sequence[str], difficulties: Sequence[str],
                    opponents: Mapping[str, Sequence[str]]) -> list[EpisodeJob]:
    """``validation_slice`` for every (trained role, fixed opponent) in ``opponents`` (role -> the other seat's
    specs), in that order, with unique job ids: the same episodes for every opponent."""
    jobs: list[EpisodeJob] = []
    for role, seats in opponents.items():
        for seat in seats:
            for job in validation_slice(episodes, templates, difficulties):
                jobs.append(replace(job, job_id=len(jobs), role=role, group=len(jobs), opponent=seat))
    return jobs


@dataclass(frozen=True)
class RoleTrajectory:
    """The tokens of one role across a whole episode.

    ``completion_ids`` interleaves the model's turns with the environment's tokens between them;
    ``env_mask`` is 1 on model tokens and 0 on environment tokens; ``logprobs`` has one entry per
    completion token (0.0 on environment tokens).  ``reward`` is the role's own reward
    (``EpisodeLog.role_rewards``: the judge's total for the Scientist, the lab's reward for the Lab Manager).
    ``grammar``: the key of the grammars its replies are decoded and scored under (``rollout.sampling.constrained``;
    ``training.rollout.grammar.trajectory_key``; ``training.rollout.play`` always sets it).
    """

    role: AgentRole
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    env_mask: list[int]
    reward: float
    turns: int
    parse_failures: int
    grammar: str = ""


@dataclass(frozen=True)
class RolloutRecord:
    job: EpisodeJob
    log: EpisodeLog
    trajectory: RoleTrajectory | None  # None when the wanted seat is not played by the trained policy
    weights_version: int = -1
    worker: str = "inprocess"
    #: Wall time of the ``play_jobs`` call that played it: ``generate_s`` (inside generation), ``total_s``.
    timing: dict = field(default_factory=dict)
    #: Every reply a model seat generated (or replayed), in episode order: what a branch replays.
    model_turns: tuple[ModelTurn, ...] = ()
