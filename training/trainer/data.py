"""The training data stream: which (seed, role, template, difficulty) each GRPO group plays.

``train_rows`` is a pure function of the run's seed, its data config and its trained roles; the trainer
builds its dataset from it (``training.trainer.grpo.build_dataset``).
"""

from __future__ import annotations

import math
import random
from collections import Counter
from typing import Any, Sequence

from replicalab.seeds import TRAIN_SEEDS, check_train_seed
from training.config.data import DataConfig


def _seed_stream(seed: int, room: int) -> tuple[int, int]:
    """``(a, b)`` of the affine permutation ``i -> (a * i + b) % room`` of ``range(room)``, from ``seed``
    (``a`` coprime with ``room``, so the first ``room`` picks are distinct)."""
    rng = random.Random(seed)
    b = rng.randrange(room)
    a = rng.randrange(1, room) if room > 1 else 1
    while math.gcd(a, room) != 1:
        a = rng.randrange(1, room)
    return a, b


def train_rows(data: DataConfig, roles: Sequence[str], seed: int, n: int) -> list[dict[str, Any]]:
    """The first ``n`` dataset rows ``{seed, role, template, difficulty}`` of the run, one per GRPO group.

    A deterministic stream: row ``i`` depends only on ``(seed, data, roles, i)``, never on ``n`` or
    ``grpo.max_steps``, so ``train_rows(..., m)[:n] == train_rows(..., n)`` and a run resumed with a larger
    ``max_steps`` continues the same data order.  Seeds are distinct (an affine permutation of
    ``TRAIN_SEEDS`` after ``data.seed_offset``, keyed by ``seed``: the run's ``TrainConfig.seed``) and come only
    from ``TRAIN_SEEDS``; roles follow ``data.role_schedule`` over ``roles`` (the trained roles, in turn unless
    ``data.role_weights`` gives one more groups), and each role's groups advance along ``data.cell_schedule``
    (every cell in turn unless ``data.difficulty_weights`` oversamples some difficulties).
    """
    if n < 0:
        raise ValueError(f"n must be non-negative, got {n}")
    room = max(len(TRAIN_SEEDS) - data.seed_offset, 0)
    if n > room:
        raise ValueError(f"{n} rows need {n} distinct training seeds; seed_offset leaves {room}")
    a, b = _seed_stream(seed, room) if n else (1, 0)
    role_of = data.role_schedule(roles, n)
    schedule = data.cell_schedule(max(Counter(role_of).values(), default=0))
    met = dict.fromkeys(roles, 0)
    rows = []
    for i, role in enumerate(role_of):
        pick = (a * i + b) % room
        template, difficulty = schedule[met[role]]
        met[role] += 1
        scenario = check_train_seed(TRAIN_SEEDS[data.seed_offset + pick])
        rows.append({"seed": scenario, "role": role, "template": template, "difficulty": difficulty})
    return rows
