"""Measure a policy model in both seats on given seeds: parse rates and mean rewards vs baselines.

``evaluate_model_seats`` plays the model with ``training.rollout.play.play_jobs`` -- the rollout code
of training, append-only chats included -- as Scientist against the scripted Lab Manager, and as
Lab Manager against the naive Scientist (plain ``scripted``), on every seed x template x difficulty, with greedy
decoding.  Per seat it reports the share of model turns that parse into a valid action
(``parse_rate = 1 - parse failures / model turns``, from the trajectories), the share of the seat's
turns the env accepted (``valid_turn_rate``), and mean rewards next to scripted baselines played on
the very same scenarios (each seat's own reward: the judge's total for the Scientist, the lab's own for the
Lab Manager).  It selects (the default-model build check, config probes), so callers pass
``VALIDATION_SEEDS`` (``replicalab.seeds.split_seeds("validation", n)``), never test seeds.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from statistics import mean
from typing import Iterable, Optional, Sequence, Union

from pydantic import BaseModel, ConfigDict

from replicalab import DIFFICULTIES, TEMPLATES, TEST_SEEDS
from replicalab.metrics import role_reward
from replicalab.scenarios import cells
from replicalab.seats import POLICY, SCRIPTED, AgentRole
from training.config.model import SamplingConfig
from training.rollout.agent import greedy_for
from training.rollout.play import play_jobs
from training.rollout.policy import PolicyModel
from training.rollout.records import EpisodeJob, RolloutRecord, episode_jobs

logger = logging.getLogger(__name__)

#: The other seat of each evaluated seat: (scientist spec, lab manager spec); ``scripted`` is the role's default
#: scripted agent (``replicalab.seats.DEFAULT_SCRIPTED``).
SEATS: dict[str, tuple[str, str]] = {
    "scientist": (POLICY, SCRIPTED),
    "lab_manager": (SCRIPTED, POLICY),
}


class SeatReport(BaseModel):
    """How the model did in one seat."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    role: AgentRole
    episodes: int
    model_turns: int
    parse_failures: int
    parse_rate: float
    valid_turn_rate: float
    mean_reward: float
    mean_reward_by_difficulty: dict[str, float]
    agreement_rate: float
    baseline_name: str
    baseline_mean_reward: float


class ModelEvaluation(BaseModel):
    """Both seats, plus the NaiveScientist reference on the same scenarios."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    seeds: list[int]
    max_new_tokens: int
    scientist: SeatReport
    lab_manager: SeatReport
    naive_scientist_mean_reward: float
    seconds: float


def _mean_reward(records: Sequence[RolloutRecord], role: str) -> float:
    """The mean of ``role``'s own reward (``EpisodeLog.role_rewards``) over ``records``."""
    return mean(role_reward(r.log, role) for r in records) if records else 0.0


def seat_report(role: AgentRole, records: Sequence[RolloutRecord], baseline_name: str,
                baseline_mean: float) -> SeatReport:
    """Summarise the rollouts of the model in ``role`` (records of ``play_jobs``)."""
    trajectories = [r.trajectory for r in records if r.trajectory is not None]
    turns = sum(t.turns for t in trajectories)
    failures = sum(t.parse_failures for t in trajectories)
    logged = [t for r in records for t in r.log.turns if t.role == role]
    by_difficulty = {d: _mean_reward([r for r in records if r.job.difficulty == d], role)
                     for d in DIFFICULTIES if any(r.job.difficulty == d for r in records)}
    return SeatReport(
        role=role,
        episodes=len(records),
        model_turns=turns,
        parse_failures=failures,
        parse_rate=1.0 - failures / max(1, turns),
        valid_turn_rate=sum(t.error is None for t in logged) / max(1, len(logged)),
        mean_reward=_mean_reward(records, role),
        mean_reward_by_difficulty=by_difficulty,
        agreement_rate=mean(float(r.log.agreement_reached) for r in records) if records else 0.0,
        baseline_name=baseline_name,
        baseline_mean_reward=baseline_mean,
    )


def _play(policy: Optional[PolicyModel], jobs: list[EpisodeJob], scientist: str, lab_manager: str,
          sampling: SamplingConfig, batch_size: int) -> list[RolloutRecord]:
    out: list[RolloutRecord] = []
    for start in range(0, len(jobs), batch_size):
        out += play_jobs(policy, jobs[start:start + batch_size], scientist=scientist, lab_manager=lab_manager,
                         sampling=sampling)
    return out


def evaluate_model_seats(
    model: Union[str, Path, PolicyModel],
    seeds: Iterable[int],
    *,
    templates: Optional[Sequence[str]] = None,
    difficulties: Optional[Sequence[str]] = None,
    sampling: Optional[SamplingConfig] = None,
    batch_size: int = 64,
) -> ModelEvaluation:
    """Evaluate ``model`` (a checkpoint directory, model id or loaded policy) in both seats.

    Scientist seat: vs the scripted Lab Manager, compared with ``NaiveScientist`` on the same jobs.
    Lab Manager seat: vs ``NaiveScientist``, compared with the scripted Lab Manager.
    ``sampling`` defaults to greedy decoding with the checkpoint's ``max_new_tokens``;
    ``batch_size`` bounds how many episodes share one generate call.  This check selects, so a test seed
    among ``seeds`` is refused (ValueError) before any model loads.
    """
    started = time.perf_counter()
    seeds = list(seeds)
    leaked = [s for s in seeds if s in TEST_SEEDS]
    if leaked:
        raise ValueError(f"the seat check selects, so it may not play test seeds (got {leaked[0]}, ...): test seeds "
                         f"are for replicalab eval reports; pass validation seeds (split_seeds('validation', n))")
    policy = model if isinstance(model, PolicyModel) else PolicyModel(str(model))
    sampling = sampling or greedy_for(policy)
    reports = {}
    baselines = {"scientist": ("NaiveScientist", "scripted:naive"),
                 "lab_manager": ("ScriptedLabManager (vs Naive)", "scripted:naive")}
    for role, (scientist, lab_manager) in SEATS.items():
        jobs = episode_jobs(cells(templates or TEMPLATES, difficulties or DIFFICULTIES), seeds, role)
        logger.info("evaluating %s as the %s on %d episodes (and its baseline on the same)", policy.name_or_path,
                    role, len(jobs))
        records = _play(policy, jobs, scientist, lab_manager, sampling, batch_size)
        name, spec = baselines[role]
        baseline = _mean_reward(_play(None, jobs, spec, "scripted", sampling, batch_size), role)
        reports[role] = seat_report(role, records, name, baseline)  # type: ignore[arg-type]
    return ModelEvaluation(
        model=str(policy.name_or_path),
        seeds=seeds,
        max_new_tokens=sampling.max_new_tokens,
        scientist=reports["scientist"],
        lab_manager=reports["lab_manager"],
        naive_scientist_mean_reward=reports["scientist"].baseline_mean_reward,
        seconds=time.perf_counter() - started,
    )
