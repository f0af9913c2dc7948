"""Seed splits: three disjoint ranges of scenario seeds.

- ``TRAIN_SEEDS``: the only seeds training (GRPO rows, SFT warm-start data) plays.
- ``VALIDATION_SEEDS``: everything that selects or stops -- the periodic check during training
  (``val/*`` metrics), sweep metrics, the default-model build check, probes that choose configs.
- ``TEST_SEEDS``: played only by ``replicalab eval`` reports (and the figures quoted from them), so a
  test figure is honest: nothing was chosen by looking at it.
"""

from __future__ import annotations

TRAIN_SEEDS = range(0, 1_000_000)
TEST_SEEDS = range(1_000_000, 1_100_000)
VALIDATION_SEEDS = range(2_000_000, 2_100_000)

#: Split name -> its seeds (the names ``EvalConfig.split`` and reports use).
SPLITS: dict[str, range] = {"train": TRAIN_SEEDS, "validation": VALIDATION_SEEDS, "test": TEST_SEEDS}
#: Split name -> the first part of the names of metrics measured on it: ``val/reward/mean`` (the check
#: during training), ``test/<agent>/mean_reward`` (an eval report on the test split).
METRIC_PREFIXES: dict[str, str] = {"train": "train", "validation": "val", "test": "test"}


def check_train_seed(seed: int) -> int:
    """Return ``seed`` if it is a training seed; raise ValueError for a validation, test or out-of-range one."""
    if seed not in TRAIN_SEEDS:
        raise ValueError(f"seed {seed} is not a training seed (training draws from {TRAIN_SEEDS})")
    return seed


def split_seeds(split: str, count: int, offset: int = 0) -> range:
    """Seeds ``offset .. offset + count - 1`` of ``split``; a one-line ValueError naming the valid range
    for an unknown split, a negative count or offset, or a slice past the split's end."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; valid splits: {', '.join(SPLITS)}")
    seeds = SPLITS[split]
    if offset < 0 or count < 0 or offset + count > len(seeds):
        raise ValueError(f"{split} split has {len(seeds)} seeds ({seeds.start}..{seeds.stop - 1}): need "
                         f"0 <= offset and 0 <= count with offset + count <= {len(seeds)}, got offset {offset}, "
                         f"count {count}")
    return seeds[offset: offset + count]


def split_of(seed: int) -> str | None:
    """The split ``seed`` belongs to, or None outside every split."""
    return next((name for name, seeds in SPLITS.items() if seed in seeds), None)
