"""Measure a policy model in both seats on given seeds: parse rates and mean rewards vs baselines.

``evaluate_model_seats`` plays the model as Scientist against the scripted Lab Manager, and as Lab
Manager against ``AdaptiveScientist``, on every seed x template x difficulty, batching the model's
turns across episodes.  It reports, per seat, the share of model turns that parse into a valid action
(``parse_rate``) and the share the env accepted as valid turns (``valid_turn_rate``), and the mean
rewards next to the scripted baselines on the very same scenarios.
"""

from __future__ import annotations

import time
from pathlib import Path
from statistics import mean
from typing import Iterable, Optional, Sequence, Union

from pydantic import BaseModel, ConfigDict

from replicalab import DIFFICULTIES, TEMPLATES, ReplicaLabEnv, run_episode
from replicalab.agents import AdaptiveScientist, NaiveScientist
from replicalab.models import InvalidAction
from replicalab.parsing import parse_action
from training.model_agent import GREEDY, EpisodeRollout, EpisodeSpec, SeatRole, run_episodes_batched
from training.model_config import SamplingConfig
from training.policy import PolicyModel


class SeatReport(BaseModel):
    """How the model did in one seat."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    role: SeatRole
    episodes: int
    model_turns: int
    parse_rate: float
    valid_turn_rate: float
    mean_reward: float
    agreement_rate: float
    baseline_name: str
    baseline_mean_reward: float


class ModelEvaluation(BaseModel):
    """Both seats, plus the NaiveScientist reference on the same scenarios."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    seeds: list[int]
    scientist: SeatReport
    lab_manager: SeatReport
    naive_scientist_mean_reward: float
    seconds: float


def episode_specs(seeds: Iterable[int], templates: Optional[Sequence[str]] = None,
                  difficulties: Optional[Sequence[str]] = None) -> list[EpisodeSpec]:
    """Every seed x template x difficulty."""
    return [EpisodeSpec(s, t, d) for s in seeds for t in (templates or TEMPLATES)
            for d in (difficulties or DIFFICULTIES)]


def _scripted_mean(specs: Sequence[EpisodeSpec], make_scientist) -> float:
    rewards = [
        run_episode(ReplicaLabEnv(), make_scientist(), None, seed=s.seed, template=s.template,
                    difficulty=s.difficulty).total_reward
        for s in specs
    ]
    return mean(rewards) if rewards else 0.0


def seat_report(role: SeatRole, rollouts: Sequence[EpisodeRollout], baseline_name: str,
                baseline_mean: float) -> SeatReport:
    """Summarise the rollouts of the model in ``role``."""
    gens = [g for r in rollouts for g in r.generations]
    parsed = sum(not isinstance(parse_action(g.text, role), InvalidAction) for g in gens)
    turns = [t for r in rollouts for t in r.log.turns if t.role == role]
    valid = sum(t.error is None for t in turns)
    return SeatReport(
        role=role,
        episodes=len(rollouts),
        model_turns=len(gens),
        parse_rate=parsed / max(1, len(gens)),
        valid_turn_rate=valid / max(1, len(turns)),
        mean_reward=mean(r.log.total_reward for r in rollouts) if rollouts else 0.0,
        agreement_rate=mean(float(r.log.agreement_reached) for r in rollouts) if rollouts else 0.0,
        baseline_name=baseline_name,
        baseline_mean_reward=baseline_mean,
    )


def evaluate_model_seats(
    model: Union[str, Path, PolicyModel],
    seeds: Iterable[int],
    *,
    templates: Optional[Sequence[str]] = None,
    difficulties: Optional[Sequence[str]] = None,
    sampling: SamplingConfig = GREEDY,
    batch_size: int = 64,
) -> ModelEvaluation:
    """Evaluate ``model`` (a checkpoint directory, model id or loaded policy) in both seats.

    Scientist seat: vs the scripted Lab Manager, compared with ``NaiveScientist`` on the same specs.
    Lab Manager seat: vs ``AdaptiveScientist``, compared with the scripted Lab Manager.
    ``batch_size`` bounds how many episodes share one generate call.
    """
    started = time.perf_counter()
    policy = model if isinstance(model, PolicyModel) else PolicyModel(str(model), sampling=sampling)
    seeds = list(seeds)
    specs = episode_specs(seeds, templates, difficulties)
    roll: dict[str, list[EpisodeRollout]] = {"scientist": [], "lab_manager": []}
    for role in roll:
        for start in range(0, len(specs), batch_size):
            chunk = specs[start:start + batch_size]
            roll[role] += run_episodes_batched(policy, role, chunk, sampling=sampling)  # type: ignore[arg-type]
    naive = _scripted_mean(specs, NaiveScientist)
    adaptive = _scripted_mean(specs, AdaptiveScientist)
    return ModelEvaluation(
        model=str(policy.name_or_path),
        seeds=seeds,
        scientist=seat_report("scientist", roll["scientist"], "NaiveScientist", naive),
        lab_manager=seat_report("lab_manager", roll["lab_manager"], "ScriptedLabManager (vs Adaptive)",
                                adaptive),
        naive_scientist_mean_reward=naive,
        seconds=time.perf_counter() - started,
    )
