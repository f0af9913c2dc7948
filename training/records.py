"""Typed, picklable records that cross the rollout boundary (workers -> driver -> trainer)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from replicalab.models import EpisodeLog

Role = Literal["scientist", "lab_manager"]


@dataclass(frozen=True)
class EpisodeJob:
    """One episode to play.  ``role`` is the seat whose trajectory is wanted; ``group`` is the GRPO
    group (same seed, role and opponent); ``job_id`` is unique within a rollout step."""

    job_id: int
    seed: int
    template: str
    difficulty: str
    role: Role
    group: int = 0


@dataclass(frozen=True)
class RoleTrajectory:
    """The tokens of one role across a whole episode.

    ``completion_ids`` interleaves the model's turns with the environment's tokens between them;
    ``env_mask`` is 1 on model tokens and 0 on environment tokens; ``logprobs`` has one entry per
    completion token (0.0 on environment tokens).  ``reward`` is the judge's total.
    """

    role: Role
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    env_mask: list[int]
    reward: float
    turns: int
    parse_failures: int


@dataclass(frozen=True)
class RolloutRecord:
    job: EpisodeJob
    log: EpisodeLog
    trajectory: RoleTrajectory | None  # None when the wanted seat is not played by the trained policy
    weights_version: int = -1
    worker: str = "inprocess"
    extra: dict = field(default_factory=dict)
