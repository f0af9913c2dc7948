"""``SweepConfig``: a base train config, a search space over any config key, a metric and a budget
(torch-free, so sweep YAML validates anywhere)."""

from __future__ import annotations

import itertools
import math
import random
from pathlib import Path
from typing import Any, Literal, Optional, Sequence, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator

from training.config.loading import load_config
from training.config.train import load_train_config

_STRICT = ConfigDict(extra="forbid", frozen=True)


class Range(BaseModel):
    """A continuous range for random search (``log`` samples uniformly in log space)."""

    model_config = _STRICT
    low: float
    high: float
    log: bool = False

    @model_validator(mode="after")
    def _order(self) -> "Range":
        if not self.low < self.high or (self.log and self.low <= 0):
            raise ValueError("a range needs low < high (and low > 0 when log)")
        return self


class SweepConfig(BaseModel):
    model_config = _STRICT
    name: str = "sweep"
    base: str = "configs/train/default.yaml"
    overrides: list[str] = Field(default_factory=list)
    method: Literal["grid", "random"] = "grid"
    search: dict[str, Union[list[Any], Range]] = Field(default_factory=dict)
    num_samples: int = Field(default=4, ge=1)  # random search: trials; grid: ignored
    max_trials: int = Field(default=16, ge=1)
    metric: str = "reward/mean"
    metric_window: int = Field(default=3, ge=1)  # mean of the metric's last N logged values
    mode: Literal["max", "min"] = "max"
    max_concurrent_trials: int = Field(default=1, ge=1)
    cpus_per_trial: float = Field(default=2.0, gt=0)
    out: str = "runs/sweeps"
    seed: int = 0

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
        # every key must be a valid TrainConfig key: try the first point
        load_train_config(self.base, [*self.overrides, *_as_overrides(self.trials()[0])])
        return self

    @property
    def grid_size(self) -> int:
        return math.prod(len(v) for v in self.search.values() if isinstance(v, list))

    def trials(self) -> list[dict[str, Any]]:
        """Every trial's parameters, deterministic from ``seed``."""
        keys = list(self.search)
        if self.method == "grid":
            return [dict(zip(keys, combo)) for combo in itertools.product(*(self.search[k] for k in keys))]
        rng = random.Random(self.seed)
        out = []
        for _ in range(min(self.num_samples, self.max_trials)):
            point = {}
            for k, v in self.search.items():
                if isinstance(v, Range):
                    point[k] = (math.exp(rng.uniform(math.log(v.low), math.log(v.high))) if v.log
                                else rng.uniform(v.low, v.high))
                else:
                    point[k] = rng.choice(v)
            out.append(point)
        return out


def _as_overrides(params: dict[str, Any]) -> list[str]:
    import json

    return [f"{k}={json.dumps(v)}" for k, v in params.items()]


def trial_overrides(params: dict[str, Any]) -> list[str]:
    return _as_overrides(params)


def load_sweep_config(path: Optional[str | Path], overrides: Sequence[str] = ()) -> SweepConfig:
    return load_config(SweepConfig, path, overrides)
