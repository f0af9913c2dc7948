"""``SweepConfig``: a base train config, a search space over any config key, a metric, a scheduler and a
budget (torch- and ray-free, so sweep YAML validates anywhere; ``training.sweep.space`` turns the search into
Ray Tune's search space)."""

from __future__ import annotations

import itertools
import math
import random
from pathlib import Path
from typing import Any, Literal, Optional, Sequence, Union

from pydantic import BaseModel, Field, ValidationError, model_validator

from replicalab.seeds import METRIC_PREFIXES
from training.config.loading import STRICT, ConfigError, load_config, one_line
from training.config.train import load_train_config

#: Metric prefixes of splits a sweep may never select on (test reports; the pre-split name of the test split).
FORBIDDEN_METRIC_PREFIXES = (f"{METRIC_PREFIXES['test']}/", "heldout/")
#: Prefix of the periodic validation check's metrics (``validation.every_steps`` must be on to log them).
VALIDATION_PREFIX = f"{METRIC_PREFIXES['validation']}/"


class Range(BaseModel):
    """A continuous range for random search (``log`` samples uniformly in log space)."""

    model_config = STRICT
    low: float = Field(description="Lower end of the range.")
    high: float = Field(description="Upper end of the range (above low).")
    log: bool = Field(default=False, description="Sample uniformly in log space (low must be positive).")

    @model_validator(mode="after")
    def _order(self) -> "Range":
        if not self.low < self.high or (self.log and self.low <= 0):
            raise ValueError("a range needs low < high (and low > 0 when log)")
        return self


class SchedulerConfig(BaseModel):
    """Which Tune scheduler stops trials early, from the metric a trial reports at every logged value (the
    validation check for a ``val/...`` metric).  Its clock is the training step of the report."""

    model_config = STRICT
    kind: Literal["none", "asha", "median"] = Field(default="none", description=(
        "none: every trial trains to the end; asha: asynchronous successive halving (Tune's ASHAScheduler); "
        "median: stop a trial whose score falls below the median of the others at the same step."))
    grace_period: int = Field(default=1, ge=1, description=(
        "Training steps a trial always gets before it may be stopped (asha, median)."))
    reduction_factor: float = Field(default=2.0, gt=1.0, description=(
        "asha: the fraction 1/reduction_factor of trials continues past each rung."))
    min_samples_required: int = Field(default=2, ge=1, description=(
        "median: other trials that must have reported at a step before one is compared with them."))


class SweepConfig(BaseModel):
    """Trials of ``replicalab train``: ``base`` + ``overrides`` + one point of ``search`` each, scored by
    ``metric`` from the trial's ``metrics.jsonl``: a ``val/...`` metric (the periodic check on
    ``VALIDATION_SEEDS``) or a training-side one (``reward/mean``, ``train/...``).  A metric on the test
    split is refused: test seeds are for final reports only."""

    model_config = STRICT
    name: str = Field(default="sweep", description=(
        "Sweep name: its directory under out, the trials' run-name prefix and their W&B group."))
    base: str = Field(default="configs/train/default.yaml", description="The TrainConfig YAML every trial starts from.")
    overrides: list[str] = Field(default_factory=list, description=(
        "KEY=VALUE overrides applied to base in every trial, before the trial's own parameters."))
    method: Literal["grid", "random"] = Field(default="grid", description=(
        "grid: every combination of the listed values (Tune's grid_search); random: num_samples points from "
        "Tune's search space, drawn with seed (a list is tune.choice, a range tune.uniform or tune.loguniform)."))
    search: dict[str, Union[list[Any], Range]] = Field(default_factory=dict, description=(
        "Dotted TrainConfig key -> list of values, or (random search) a range {low, high, log}."))
    num_samples: int = Field(default=4, ge=1, description="Random search: trials drawn; grid: ignored.")
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig, description=(
        "Early stopping of trials by the metric they report during training."))
    max_trials: int = Field(default=16, ge=1, description="Upper bound on trials (a larger grid fails).")
    metric: str = Field(default="reward/mean", description=(
        "metrics.jsonl key that scores a trial: val/... (validation seeds; needs validation.every_steps > 0) "
        "or a training-side key such as reward/mean; test-split metrics are refused."))
    metric_window: int = Field(default=3, ge=1, description=(
        "A trial's score is the mean of the metric's last N logged values."))
    mode: Literal["max", "min"] = Field(default="max", description=(
        "Whether the best trial maximises or minimises the score."))
    max_concurrent_trials: int = Field(default=1, ge=1, description=(
        "Trials Ray Tune runs at once (at most: each also waits for its placement group)."))
    cpus_per_trial: float = Field(default=2.0, gt=0, description=(
        "Ray CPUs each trial's learner reserves; its GPUs and rollout workers' bundles come from the trial's "
        "placement plan (replicalab preflight)."))
    out: str = Field(default="runs/sweeps", description=(
        "Parent directory: trials, trials.csv/.md and best.yaml go under out/name."))
    seed: int = Field(default=0, description="Seed of random search's draws.")

    @model_validator(mode="after")
    def _check(self) -> "SweepConfig":
        if not self.search:
            raise ValueError("search must name at least one config key")
        if self.method == "grid":
            bad = [k for k, v in self.search.items() if not isinstance(v, list) or not v]
            if bad:
                raise ValueError(f"grid search needs a non-empty list of values for {', '.join(bad)}")
            if self.grid_size > self.max_trials:
                raise ValueError(f"the grid has {self.grid_size} trials, over max_trials={self.max_trials}")
        if self.metric.startswith(FORBIDDEN_METRIC_PREFIXES):
            raise ValueError(f"metric {self.metric!r} is on the test split, which nothing may select on; "
                             f"use a validation metric ({VALIDATION_PREFIX}...) or a training-side one")
        # every key must be a valid TrainConfig key: try the first point; a val/ metric: every trial must log it
        points = self.trials()
        first = load_train_config(self.base, [*self.overrides, *_as_overrides(points[0])])
        if self.metric.startswith(VALIDATION_PREFIX):
            for i, params in enumerate(points):
                cfg = first if i == 0 else load_train_config(self.base, [*self.overrides, *_as_overrides(params)])
                _check_validation_runs(cfg, self.metric, params)
        return self

    @property
    def grid_size(self) -> int:
        return math.prod(len(v) for v in self.search.values() if isinstance(v, list))

    @property
    def num_trials(self) -> int:
        """Trials the sweep runs: the grid's size, or ``num_samples`` (capped by ``max_trials``)."""
        return self.grid_size if self.method == "grid" else min(self.num_samples, self.max_trials)

    def trials(self) -> list[dict[str, Any]]:
        """Points the config is checked with before anything runs: the whole grid, or for random search
        ``num_trials`` points drawn with ``seed`` (Tune draws the trials' own points from the same space)."""
        keys = list(self.search)
        if self.method == "grid":
            return [dict(zip(keys, combo)) for combo in itertools.product(*(self.search[k] for k in keys))]
        rng = random.Random(self.seed)
        out = []
        for _ in range(self.num_trials):
            point = {}
            for k, v in self.search.items():
                if isinstance(v, Range):
                    point[k] = (math.exp(rng.uniform(math.log(v.low), math.log(v.high))) if v.log
                                else rng.uniform(v.low, v.high))
                else:
                    point[k] = rng.choice(v)
            out.append(point)
        return out


def _check_validation_runs(cfg: Any, metric: str, params: dict[str, Any]) -> None:
    """A ``val/...`` metric is logged only if the trial's validation check runs at least once: it needs
    ``1 <= validation.every_steps <= grpo.max_steps`` and the Scientist seat trained (``policy``).
    Checked for every trial, before any trains (a search may set either key)."""
    every, steps = cfg.validation.every_steps, cfg.grpo.max_steps
    if not 1 <= every <= steps or "scientist" not in cfg.seats.trained_roles:
        raise ValueError(f"metric {metric!r} needs the validation check on, and trial {params} never runs it "
                         f"(validation.every_steps={every}, grpo.max_steps={steps}, seats.scientist="
                         f"{cfg.seats.scientist}): set validation.every_steps to 1..{steps} in base or overrides, "
                         "with seats.scientist=policy")


def _as_overrides(params: dict[str, Any]) -> list[str]:
    import json

    return [f"{k}={json.dumps(v)}" for k, v in params.items()]


def trial_overrides(params: dict[str, Any]) -> list[str]:
    return _as_overrides(params)


def load_sweep_config(path: Optional[str | Path], overrides: Sequence[str] = ()) -> SweepConfig:
    """The config of a YAML file plus overrides; an invalid one raises a one-line ``ConfigError``."""
    try:
        return load_config(SweepConfig, path, overrides)
    except ValidationError as exc:
        raise ConfigError(one_line(exc)) from None
