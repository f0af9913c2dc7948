"""The one place a ``TrainConfig`` becomes the objects a training run needs.

``run_train`` (``training.trainer.run``) calls these; everything they build takes the parts it uses (a
``RolloutSpec``, a ``RayPool``, ``GRPOParams``, ``LoraConfig``, rows), never the whole config:

- ``device(cfg)``: the learner's torch device (``training.rollout.device.resolve_device``);
- ``rollout_spec(cfg, ...)``: what every collect shares (seats, sampling, engine, limits);
- ``opponent_pool(cfg)``: the opponent pools and the policy's snapshots (``seats.pools``);
- ``plan_for(cfg, ...)``: the run's placement on a cluster (``training.cluster.preflight``);
- ``make_run_backend(cfg, ...)``: the main process's rollout backend, placed per the plan;
- ``data_stream(cfg)``: the training rows, ``n -> rows`` (``training.trainer.data.train_rows``);
- ``run_logger(cfg, ...)``: the run's ``RunLogger`` (or a ``NullRunLogger`` off the main process);
- ``grpo_args(cfg, ...)``: TRL's ``GRPOConfig`` of the run;
- ``make_trainer(cfg, ...)``: the GRPO trainer with its rollout function and callbacks.

Heavy imports (torch, trl, ray) happen inside the functions that need them, so the config-level helpers
(``data_stream``) import in milliseconds.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from training.cluster.resources import ClusterResources
from training.config.grpo import ROLE_SCALE
from training.config.train import TrainConfig
from training.rollout.contract import Backend, RolloutSpec
from training.trainer.data import train_rows

#: The Ray session a run started (driver pid + session name), so the next start can clean up after a
#: killed driver (``training.cluster.ray_session.clean_stale_session``).
RAY_SESSION_FILE = "ray_session.json"


def device(cfg: TrainConfig) -> str:
    """``cfg.device`` resolved to ``"cpu"`` or ``"cuda"`` (a one-line error when CUDA is asked for and absent)."""
    from training.rollout.device import resolve_device

    return resolve_device(cfg.device).type


def rollout_spec(cfg: TrainConfig, model_dir: str, device: str, chat_template: Optional[str],
                 model_dirs: Optional[Mapping[str, str]] = None) -> RolloutSpec:
    """What every collect of the run shares: the seats, the sampling (its only copy), engine and limits;
    ``model_dirs``: every model name's local directory (``training.model.snapshot.local_model_dirs``)."""
    return RolloutSpec(model=model_dir, scientist=cfg.seats.scientist, lab_manager=cfg.seats.lab_manager,
                       sampling=cfg.rollout.sampling, max_rounds=cfg.rollout.max_rounds, device=device,
                       engine=cfg.rollout.engine, vllm=cfg.rollout.vllm, chat_template=chat_template,
                       opponents=cfg.opponent_seats, model_dirs=tuple((model_dirs or {}).items()))


def opponent_pool(cfg: TrainConfig):
    """The run's ``OpponentPool`` (``seats.pools``), or None when no role has a pool."""
    from training.trainer.pool import OpponentPool

    return OpponentPool(cfg.seats.pools, cfg.seats.snapshots, cfg.seed) if cfg.seats.pools else None


def plan_for(cfg: TrainConfig, processes: int) -> Callable[[ClusterResources], Any]:
    """``cluster -> PlacementPlan`` of this run with ``processes`` learner processes (logged; an impossible
    layout is refused with one line)."""
    from training.cluster.preflight import preflight, sharded_learner

    return partial(preflight, cfg, lora=cfg.lora.enabled, learner_processes=processes,
                   sharded=cfg.learner.sharded or sharded_learner())


def make_run_backend(cfg: TrainConfig, spec: RolloutSpec, run_dir: Path, processes: int,
                     python: Optional[str]) -> Backend:
    """The main process's rollout backend, placed per the pre-flight plan (printed before any model loads).
    ``python``: the rollout workers' interpreter (``training.rollout.engines.worker_python``)."""
    from training.rollout.backends import make_backend
    from training.rollout.ray_backend import RayPool

    planner = plan_for(cfg, processes)
    if cfg.rollout.backend != "ray":
        planner(ClusterResources.local())
        return make_backend("inprocess", spec)
    r = cfg.rollout
    pool = RayPool(num_workers=r.num_workers, torch_threads_per_worker=r.torch_threads_per_worker,
                   max_restarts=r.max_worker_restarts, ray_address=r.ray_address,
                   session_record=run_dir / RAY_SESSION_FILE, plan_for=planner, python=python,
                   ready_timeout_s=r.ready_timeout_s,
                   weight_sync=r.weight_sync, sync_bucket_mib=r.weight_sync_bucket_mib,
                   sync_timeout_s=r.weight_sync_timeout_s)
    return make_backend("ray", spec, pool=pool)


def data_stream(cfg: TrainConfig) -> Callable[[int], list[dict[str, Any]]]:
    """``n -> the run's first n training rows`` (one per GRPO group)."""
    return partial(train_rows, cfg.data, cfg.seats.trained_roles, cfg.seed)


def run_logger(cfg: TrainConfig, run_dir: Path, *, main: bool, resume: Optional[dict[str, int]],
               observe: Optional[Callable[[int, dict], None]] = None):
    """The run's ``RunLogger`` on the main process (``resume``: the log positions of the checkpoint resumed
    from; ``observe``: called with every logged row), a ``NullRunLogger`` elsewhere."""
    from training.tracking import NullRunLogger, RunLogger

    return RunLogger(run_dir, cfg, resume=resume, observe=observe) if main else NullRunLogger()


def grpo_args(cfg: TrainConfig, *, device: str, processes: int = 1):
    """TRL's ``GRPOConfig`` of the run: ``cfg.grpo``'s hyperparameters, checkpoints in ``cfg.checkpoints_dir``,
    scored at the rollouts' temperature, ``processes`` learner processes sharing each step, sharded and timed
    out as ``cfg.learner`` says."""
    from training.trainer.grpo import grpo_config
    from training.trainer.sharding import sharding_kwargs

    return grpo_config(cfg.grpo, output_dir=cfg.checkpoints_dir, batch_per_process=cfg.per_process_batch(processes),
                       temperature=cfg.scoring_temperature, seed=cfg.seed, checkpoint=cfg.checkpoint,
                       dtype=cfg.resolve_dtype(device),
                       use_cpu=device == "cpu", bf16=cfg.resolve_bf16(device), sharding=sharding_kwargs(cfg.learner))


def make_trainer(cfg: TrainConfig, model_dir: Path, backend: Optional[Backend], logger: Any, *, device: str,
                 chat_template: Optional[str], processes: int):
    """The GRPO trainer: TRL's config from ``cfg.grpo``, the rows of ``data_stream``, the rollout function
    and the validation check on ``backend`` (None off the main process)."""
    from training.rollout.records import validation_jobs
    from training.trainer.advantages import RoleBaseline
    from training.trainer.grpo import build_trainer
    from training.trainer.pool import SavePoolCallback
    from training.trainer.rollouts import EpisodeRollouts, job_key
    from training.trainer.validation import ValidationCallback

    args = grpo_args(cfg, device=device, processes=processes)
    pool = opponent_pool(cfg)
    rows = data_stream(cfg)(cfg.num_train_rows)
    rollouts = EpisodeRollouts(backend, logger, num_generations=cfg.grpo.num_generations, seed=cfg.seed,
                               lora=cfg.lora, pool=pool, max_staleness=cfg.rollout.max_staleness,
                               branch=cfg.grpo.branch if cfg.grpo.group_by == "turn" else None,
                               keys=[job_key(row) for row in rows] if cfg.rollout.max_staleness else ())
    jobs = validation_jobs(cfg.validation.episodes, cfg.data.templates, cfg.data.difficulties,
                           cfg.validation_opponents)
    validation = ValidationCallback(backend, logger, jobs=jobs, every_steps=cfg.validation.every_steps,
                                    seed=cfg.seed, lora=cfg.lora)
    return build_trainer(model_dir, args=args, rows=rows, rollouts=rollouts,
                         validation=validation, logger=logger, lora=cfg.lora,
                         rollout_correction_clip=cfg.grpo.rollout_correction_clip,
                         role_baseline=RoleBaseline(cfg.grpo.role_baseline_decay)
                         if cfg.grpo.advantage == "role_baseline" else None,
                         extra_callbacks=[SavePoolCallback(pool)] if pool is not None else [],
                         chat_template=chat_template, rescore_batch_size=cfg.grpo.rescore_batch_size,
                         constrained=cfg.rollout.sampling.constrained,
                         scale_by_role=cfg.grpo.scale_rewards == ROLE_SCALE)
