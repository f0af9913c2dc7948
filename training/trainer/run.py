"""``replicalab train``: GRPO self-play training, from a config to a trained checkpoint.

The run directory (``output_dir/run_name``) holds the resolved ``config.yaml``, ``metrics.jsonl``,
``episodes.jsonl``, the W&B run, ``checkpoints/checkpoint-N`` (weights, optimizer, scheduler, RNG
states and the trainer state, which fixes the data position) and ``final/``.  ``resume=True``
continues from the newest checkpoint; rollouts are seeded from (seed, step), so a resumed run plays
the same episodes it would have played.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from training.config.loading import save_resolved
from training.config.train import TrainConfig
from training.trainer.checkpoints import latest_checkpoint
from training.trainer.export import save_final

FINAL_DIR = "final"


def _device(cfg: TrainConfig) -> str:
    import torch

    if cfg.device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("config asks for device cuda but no CUDA device is available")
    return cfg.device


def run_train(cfg: TrainConfig, *, resume: bool = False) -> dict[str, Any]:
    """Train per ``cfg``; return the end-of-run summary."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from training.model.validate import resolve_chat_template, validate_model, validate_seats
    from training.rollout.backends import make_backend
    from training.tracking import RunLogger
    from training.trainer.grpo import build_trainer

    run_dir = cfg.run_dir
    chat_template = resolve_chat_template(cfg.chat_template)
    model_dir = validate_model(cfg.model, chat_template=chat_template)  # before anything is written
    validate_seats([cfg.seats.scientist, cfg.seats.lab_manager], chat_template=chat_template)
    checkpoint = latest_checkpoint(cfg.checkpoints_dir) if resume else None
    if resume and checkpoint is None:
        raise FileNotFoundError(f"--resume: no checkpoint under {cfg.checkpoints_dir}")
    if not resume and latest_checkpoint(cfg.checkpoints_dir) is not None:
        raise FileExistsError(f"{run_dir} already holds checkpoints; pass --resume or choose another run_name")
    run_dir.mkdir(parents=True, exist_ok=True)
    save_resolved(cfg, run_dir)
    device = _device(cfg)
    frozen = [s for s in (cfg.seats.scientist, cfg.seats.lab_manager) if s.startswith("model:")]
    backend = make_backend(
        cfg.rollout.backend, model=model_dir, scientist=cfg.seats.scientist, lab_manager=cfg.seats.lab_manager,
        sampling=cfg.rollout.sampling, max_rounds=cfg.rollout.max_rounds, device=device,
        num_workers=cfg.rollout.num_workers, torch_threads_per_worker=cfg.rollout.torch_threads_per_worker,
        max_restarts=cfg.rollout.max_worker_restarts, ray_address=cfg.rollout.ray_address, frozen=frozen,
        chat_template=chat_template,
    )
    start = time.perf_counter()
    try:
        with RunLogger(run_dir, cfg) as logger:
            trainer = build_trainer(cfg, Path(model_dir), run_dir, backend, logger,
                                    use_cpu=device == "cpu", bf16=cfg.resolve_bf16(device),
                                    chat_template=chat_template)
            result = trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
            final = run_dir / FINAL_DIR
            save_final(trainer, model_dir, final, chat_template=chat_template)
            logger.log_artifact(final, name=f"{cfg.run_name}-final", type="model")
            summary = {
                "run_dir": str(run_dir), "final_model": str(final), "steps": trainer.state.global_step,
                "resumed_from": str(checkpoint) if checkpoint else None,
                "train_loss": float(result.training_loss), "wall_seconds": round(time.perf_counter() - start, 1),
                "episodes": trainer.rollout_func.episodes_played,
                "worker_restarts": getattr(backend, "restarts", 0),
            }
            logger.summary(summary)
    finally:
        backend.close()
    return summary


def print_summary(summary: dict[str, Any]) -> None:
    print("\nTraining finished")
    for key, value in summary.items():
        print(f"  {key:<16} {value}")
