"""Seed splits.  Training draws only from TRAIN_SEEDS; HELDOUT_SEEDS is for evaluation only."""

TRAIN_SEEDS = range(0, 1_000_000)
HELDOUT_SEEDS = range(1_000_000, 1_100_000)


def check_train_seed(seed: int) -> int:
    """Return ``seed`` if it is a training seed; raise ValueError for a held-out or out-of-range one."""
    if seed not in TRAIN_SEEDS:
        raise ValueError(f"seed {seed} is not a training seed (training draws from {TRAIN_SEEDS})")
    return seed
