"""``LoggerCallback``: the trainer's own scalars, step times, CUDA peak memory and checkpoints into the run's
``RunLogger``."""

from __future__ import annotations

import time
from pathlib import Path

import torch
from transformers import TrainerCallback

from training.tracking import RunLogger
from training.trainer.rollouts import EpisodeRollouts


class LoggerCallback(TrainerCallback):
    """Forward TRL's scalars (loss, KL, clip ratios, lr...) to the run logger, with the step's time
    left after weight sync and rollout as ``time/optimizer_s``; checkpoints as artifacts.  On CUDA, each step's
    peak memory of this process's device, rollouts played in it included: ``memory/peak_allocated_gib`` (tensors)
    and ``memory/peak_reserved_gib`` (what the caching allocator held), what the planner's estimate bounds."""

    def __init__(self, logger: RunLogger, rollouts: EpisodeRollouts):
        self.logger, self.rollouts = logger, rollouts
        self.step_start = 0.0

    def on_step_begin(self, args, state, control, **kwargs):
        self.step_start = time.perf_counter()
        if torch.cuda.is_initialized():
            torch.cuda.reset_peak_memory_stats()

    def on_step_end(self, args, state, control, **kwargs):
        t = self.rollouts.last_timing
        if t:
            step_s = time.perf_counter() - self.step_start
            self.logger.log(state.global_step, {"time/step_s": step_s, "time/optimizer_s": max(
                0.0, step_s - t["time/weight_sync_s"] - t["time/rollout_s"])})
        if torch.cuda.is_initialized():
            self.logger.log(state.global_step, cuda_peak_memory())

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs:
            scalars = {f"train/{k}": float(v) for k, v in logs.items() if isinstance(v, (int, float))}
            self.logger.log(state.global_step, scalars)

    def on_save(self, args, state, control, **kwargs):
        path = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if path.exists():
            self.logger.log_artifact(path, name=f"checkpoint-{state.global_step}", type="model")


def cuda_peak_memory() -> dict[str, float]:
    """This process's peak allocated and reserved memory on its current CUDA device since the last reset, GiB."""
    return {"memory/peak_allocated_gib": torch.cuda.max_memory_allocated() / 2**30,
            "memory/peak_reserved_gib": torch.cuda.max_memory_reserved() / 2**30}
