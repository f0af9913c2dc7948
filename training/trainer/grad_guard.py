"""Skip optimizer steps whose gradients are not finite, instead of writing NaN into the weights.

One NaN or inf gradient, applied, turns every weight it touches into NaN: the next rollout then
samples from NaN probabilities (on CUDA a device-side assert that kills the run) and every later
checkpoint is corrupt.  ``NonFiniteGradGuard`` checks the clipped gradients just before each
optimizer step; when any is not finite it drops them all (the optimizer skips parameters without a
gradient, so weights and Adam moments stay as they were), counts the skip and logs it as
``train/nonfinite_grad_skips``.  ``max_consecutive`` skips in a row stop the run with an error that
names the newest checkpoint.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable, Optional

import torch
from transformers import TrainerCallback

from training.trainer.checkpoints import latest_checkpoint
from training.trainer.distributed import max_over_processes

log = logging.getLogger(__name__)

#: Consecutive skipped steps after which training stops (the policy is not recovering).
MAX_CONSECUTIVE_SKIPS = 8
SKIPS_METRIC = "train/nonfinite_grad_skips"


def grads_finite(model: torch.nn.Module) -> bool:
    """True when every gradient of ``model`` is finite (parameters without a gradient are ignored)."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if not grads:
        return True
    return bool(torch.stack([torch.isfinite(g).all() for g in grads]).all())


class NonFiniteGradGuard(TrainerCallback):
    """Drop a step's gradients when any is NaN or inf; stop after ``max_consecutive`` such steps.

    ``log_metrics(step, metrics)`` (e.g. ``RunLogger.log``) receives the running skip count.
    """

    def __init__(self, log_metrics: Optional[Callable[[int, dict[str, float]], Any]] = None,
                 max_consecutive: int = MAX_CONSECUTIVE_SKIPS):
        if max_consecutive < 1:
            raise ValueError(f"max_consecutive must be >= 1, got {max_consecutive}")
        self.log_metrics, self.max_consecutive = log_metrics, max_consecutive
        self.skipped = 0
        self.consecutive = 0

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        # every learner process decides alike (sharded gradients are checked shard by shard)
        if model is None or not max_over_processes(not grads_finite(model)):
            self.consecutive = 0
            return
        for p in model.parameters():
            p.grad = None
        self.skipped += 1
        self.consecutive += 1
        log.warning("step %d: non-finite gradient, update skipped (%d skipped so far)", state.global_step, self.skipped)
        if self.log_metrics is not None:
            self.log_metrics(state.global_step, {SKIPS_METRIC: float(self.skipped)})
        if self.consecutive >= self.max_consecutive:
            raise RuntimeError(
                f"{self.consecutive} consecutive optimizer steps had non-finite gradients (step "
                f"{state.global_step}); stopping. The weights are unchanged since the last finite step; the newest "
                f"checkpoint is {latest_checkpoint(Path(args.output_dir)) or 'none yet'}. Lower "
                "grpo.learning_rate or set bf16=false, then --resume.")
