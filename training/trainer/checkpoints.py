"""Checkpoints of a training run: ``<run_dir>/checkpoints/checkpoint-N``, found by step number."""

from __future__ import annotations

from pathlib import Path


def latest_checkpoint(checkpoints_dir: Path) -> Path | None:
    """The ``checkpoint-N`` with the highest N under ``checkpoints_dir``, or None."""
    ckpts = sorted(Path(checkpoints_dir).glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    return ckpts[-1] if ckpts else None
