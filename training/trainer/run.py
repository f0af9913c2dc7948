"""``replicalab train``: GRPO self-play training, from a config to a trained checkpoint.

The run directory (``output_dir/run_name``) holds the resolved ``config.yaml``, ``metrics.jsonl``,
``episodes.jsonl``, the W&B run, ``checkpoints/checkpoint-N`` (weights, optimizer, scheduler, RNG
states and the trainer state, which fixes the data position) and ``final/``.  ``resume=True``
continues from the newest complete checkpoint (``checkpoints.resume_checkpoint``: manifests verified,
the run logs cut back to the checkpoint); rollouts are seeded from (seed, step), so a resumed run plays
the same episodes it would have played.  Model paths and the run directory are checked before
anything is started or written; SIGINT/SIGTERM save a checkpoint at the next step boundary
(``interrupt``).  ``docs/faults.md`` lists the guarantees.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any, Callable

from replicalab.seats import MODEL_PREFIX
from training.config.loading import RESOLVED_CONFIG_NAME, save_resolved
from training.config.train import TrainConfig
from training.errors import UserInputError
from training.tracking import WANDB_DIRNAME, WANDB_ID_FILE
from training.trainer import build
from training.trainer.checkpoints import CHECKPOINT_PREFIX, checkpoints, resume_checkpoint
from training.trainer.curve import CURVE_PNG, SEATS_PNG, learning_curve, plot_learning_curve, plot_seat_curves
from training.trainer.export import save_final

logger = logging.getLogger(__name__)
FINAL_DIR = "final"
#: The CUDA caching allocator's settings of a run unless PYTORCH_CUDA_ALLOC_CONF says otherwise.
ALLOC_CONF = "expandable_segments:True"
#: What a run writes before its first step (the resolved config, the Ray session record, the W&B run's id and
#: files): a directory holding nothing else is a run that stopped before anything ran (a refused plan, a
#: signal while loading) and may be started again.
BEFORE_START_FILES = (RESOLVED_CONFIG_NAME, build.RAY_SESSION_FILE, WANDB_ID_FILE, WANDB_DIRNAME)
#: What ``run_train`` reports as the continuing command when the caller gives none.
DEFAULT_RESUME_COMMAND = "replicalab train --config CONFIG [the same overrides] --resume"


class RunDirError(UserInputError, FileExistsError):
    """The run directory cannot be used: a file, another program's files, or an earlier run."""


def check_run_dir(cfg: TrainConfig, resume: bool) -> None:
    """Refuse a run directory that is a file (or under one), a non-empty directory this project did not
    create (no resolved ``config.yaml``), or, without ``resume``, an earlier run's directory (one that holds
    more than ``BEFORE_START_FILES``)."""
    run_dir = Path(cfg.run_dir).expanduser()
    for parent in [run_dir, *run_dir.parents]:
        if parent.exists():
            if not parent.is_dir():
                raise RunDirError(f"output path {parent} is a file; output_dir/run_name must be a directory "
                                  f"(got output_dir={cfg.output_dir}, run_name={cfg.run_name})")
            break
    if not run_dir.is_dir() or not any(run_dir.iterdir()):
        return
    if not (run_dir / RESOLVED_CONFIG_NAME).is_file():
        raise RunDirError(f"run directory {run_dir} is not empty and was not created by replicalab train "
                          f"(no {RESOLVED_CONFIG_NAME}); refusing to write into it: choose another run_name "
                          "or output_dir")
    if not resume and any(p.name not in BEFORE_START_FILES for p in run_dir.iterdir()):
        what = "checkpoints" if checkpoints(cfg.checkpoints_dir) else "an earlier run's files"
        raise RunDirError(f"{run_dir} already holds {what}; pass --resume to continue it or choose another "
                          "run_name")


def check_models(cfg: TrainConfig) -> None:
    """The policy model and every frozen ``model:`` seat exist and hold a model and tokenizer."""
    from training.model.model_path import check_model_path, check_seat_models

    check_model_path(cfg.model)
    check_seat_models(cfg.seats.scientist, cfg.seats.lab_manager, *cfg.opponent_seats)


def _find_checkpoint(cfg: TrainConfig, resume: bool) -> tuple[Path | None, dict[str, Any]]:
    """The checkpoint to resume from (damaged newer ones set aside), or none without ``resume``."""
    if not resume:
        return None, {}
    checkpoint, manifest = resume_checkpoint(cfg.checkpoints_dir)
    logger.info("resuming from %s (step %d)", checkpoint, manifest.get("step", -1))
    return checkpoint, manifest


def run_train(cfg: TrainConfig, *, resume: bool = False, command: str | None = None,
              observe: Callable[[int, dict], None] | None = None) -> dict[str, Any]:
    """Train per ``cfg``; return the end-of-run summary.  ``command`` is the command line that continues
    this run (printed when a signal stops it; raised as ``TrainingInterrupted``); ``observe(step, metrics)``
    sees every row the run logs, once it is in ``metrics.jsonl``.

    Under ``torchrun`` / ``accelerate launch`` with N processes every process calls this: the main one
    holds the rollout backend, the logs and the W&B run (``training.trainer.distributed``); each step is
    still ``grpo.episodes_per_step`` episodes in all, and the other processes return ``{"rank": r}``."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from training.model.snapshot import local_model_dirs, seat_models
    from training.model.validate import resolve_chat_template, validate_model, validate_seats
    from training.trainer.distributed import barrier, init_learner, learner_from_env, run_on_main
    from training.trainer.sharding import check_learner, check_sharded

    check_models(cfg)  # cheap existence checks first, then the full ones, all before anything is written
    check_run_dir(cfg, resume)
    cfg.per_process_batch(learner_from_env().world_size)
    check_learner(cfg.learner)
    if cfg.deterministic:  # before any CUDA work: cuBLAS reads its workspace setting once
        from transformers.trainer_utils import enable_full_determinism

        enable_full_determinism(cfg.seed)
    # before any CUDA work too: a step's tensors change shape every step (episodes end at different lengths), and
    # expandable segments keep what the allocator reserves close to what it serves (training.cluster.memory)
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", ALLOC_CONF)
    device = build.device(cfg)
    learner = init_learner(device, timeout_s=cfg.learner.timeout_seconds, deepspeed=cfg.learner.sharding == "zero3")
    barrier()  # every process checked the run directory before the main one changes it
    checkpoint, manifest = run_on_main(lambda: _find_checkpoint(cfg, resume), share=True)
    chat_template = resolve_chat_template(cfg.chat_template)
    # every model name to a local directory (hub ids downloaded once, by the main process) before anything starts
    seats = seat_models([cfg.seats.scientist, cfg.seats.lab_manager, *cfg.opponent_seats])
    model_dirs = run_on_main(lambda: local_model_dirs([cfg.model, *seats]), share=True)
    model_dir = validate_model(model_dirs[cfg.model], chat_template=chat_template)
    validate_seats([MODEL_PREFIX + model_dirs[name] for name in seats], chat_template=chat_template)
    from training.rollout.engines import worker_python

    python = run_on_main(lambda: worker_python(cfg.rollout.engine, cfg.rollout.vllm)[0])  # the workers' interpreter
    run_on_main(lambda: save_resolved(cfg, cfg.run_dir))  # creates the run directory
    from training.trainer.checkpoint_layouts import layout_of
    from training.trainer.checkpoints import make_manifest_callback
    from training.trainer.interrupt import StopCallback, StopOnSignal, TrainingInterrupted

    run_dir = cfg.run_dir
    spec = build.rollout_spec(cfg, model_dir, device, chat_template, model_dirs=model_dirs)
    backend = run_on_main(lambda: build.make_run_backend(cfg, spec, run_dir, learner.world_size, python))
    start = time.perf_counter()
    try:
        sink = build.run_logger(cfg, run_dir, main=learner.is_main,
                                resume=manifest.get("logs", {}) if resume else None, observe=observe)
        with StopOnSignal(cfg.learner.signal_numbers()) as stop, sink:
            trainer = build.make_trainer(cfg, Path(model_dir), backend, sink, device=device,
                                         chat_template=chat_template, processes=learner.world_size)
            check_sharded(trainer, cfg.learner)
            trainer.add_callback(make_manifest_callback(sink.log_positions, layout_of(trainer)))
            trainer.add_callback(StopCallback(stop))
            rollouts = trainer.rollout_func  # training.trainer.rollouts.EpisodeRollouts
            if checkpoint is not None:  # rollout/episodes_total counts the whole run, resumed or not
                resumed_step = int(manifest.get("step", 0))
                rollouts.resume(Path(checkpoint), resumed_step, resumed_step * cfg.grpo.episodes_per_step)
            episodes_before = rollouts.episodes_played
            if stop.signum is not None:  # stopped while loading: nothing to save yet
                raise TrainingInterrupted(stop.signum, 0, None, command or DEFAULT_RESUME_COMMAND)
            result = trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
            step = trainer.state.global_step
            if stop.signum is not None and step < cfg.grpo.max_steps:
                saved = cfg.checkpoints_dir / f"{CHECKPOINT_PREFIX}{step}"
                raise TrainingInterrupted(stop.signum, step, str(saved) if saved.is_dir() else None,
                                          command or DEFAULT_RESUME_COMMAND)
            # drawn before the final save, whose collectives the other processes wait in: a main process still
            # busy after they exit can race their teardown
            curve = seats = None
            if learner.is_main:
                rows = learning_curve(run_dir)
                curve = plot_learning_curve(rows, run_dir / CURVE_PNG)
                seats = plot_seat_curves(rows, run_dir / SEATS_PNG)
            final = run_dir / FINAL_DIR
            save_final(trainer, model_dir, final, chat_template=chat_template)
            if not learner.is_main:
                return {"rank": learner.rank}
            sink.log_artifact(final, name=f"{cfg.run_name}-final", type="model")
            summary = {
                "run_dir": str(run_dir), "final_model": str(final), "steps": trainer.state.global_step,
                "resumed_from": str(checkpoint) if checkpoint else None,
                "train_loss": float(result.training_loss), "wall_seconds": round(time.perf_counter() - start, 1),
                "episodes": rollouts.episodes_played - episodes_before,
                "worker_restarts": getattr(backend, "restarts", 0),
                "learner_processes": learner.world_size,
                "learning_curve": str(curve) if curve else None,
                "seats_curve": str(seats) if seats else None,
            }
            sink.summary(summary)
    finally:
        if backend is not None:
            backend.close()
    return summary


def print_summary(summary: dict[str, Any]) -> None:
    print("\nTraining finished")
    for key, value in summary.items():
        print(f"  {key:<16} {value}")
