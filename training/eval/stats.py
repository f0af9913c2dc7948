"""Statistics of evaluation reports: stratified percentile-bootstrap intervals of a mean."""

from __future__ import annotations

import random
from typing import Any, Sequence

#: Coverage of every interval in a report.
CI_LEVEL = 0.95


def bootstrap_ci(values: Sequence[float], samples: int = 2000, seed: int = 0,
                 strata: Sequence[Any] | None = None) -> list[float]:
    """Percentile bootstrap interval of the mean at CI_LEVEL.

    With ``strata`` (one label per value) each resample draws within every stratum as many values as it
    holds, as the evaluation design does (a fixed number of seeds per template x difficulty cell), so the
    interval reflects seed-to-seed variation, not a random mix of easy and hard cells."""
    if not values:
        return [float("nan"), float("nan")]
    if strata is not None and len(strata) != len(values):
        raise ValueError(f"{len(strata)} strata labels for {len(values)} values")
    groups: dict[Any, list[float]] = {}
    for label, value in zip(strata if strata is not None else [None] * len(values), values):
        groups.setdefault(label, []).append(value)
    rng = random.Random(seed)
    n = len(values)
    means = sorted(sum(sum(rng.choices(g, k=len(g))) for g in groups.values()) / n for _ in range(samples))
    tail = (1 - CI_LEVEL) / 2
    return [means[int(tail * (samples - 1))], means[int((1 - tail) * (samples - 1))]]
