"""The pre-flight plan of a run: the model's size from its config.json, the cluster it runs on, the plan.

``preflight(cfg, cluster)`` plans ``cfg`` (``training.cluster.plan.plan_placement``) with the model's
shape read from its config.json when one can be found without loading anything, and logs the rendered
plan.  The cluster is given by hand, read from a Ray cluster, or this machine's.  ``replicalab preflight --config FILE [KEY=VALUE ...]`` (``add_arguments`` and ``run``) prints the
plan, or the one line saying why the layout cannot work (exit status 2).
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path
from typing import Optional

from replicalab.seats import DEFAULT_MODEL
from training.cluster.launcher import launched_fsdp
from training.cluster.memory import read_model_shape
from training.cluster.plan import PlacementPlan, plan_placement
from training.cluster.ray_session import connect
from training.cluster.plan_table import render_plan
from training.cluster.resources import ClusterResources
from training.config.placement import AUTO
from training.config.train import TrainConfig
from training.model.default import default_model_dir

logger = logging.getLogger(__name__)


def model_dir_of(model: str) -> Optional[Path]:
    """Where ``model``'s config.json is, without loading anything: a local directory, the embedded
    default's directory, or a Hugging Face id already in the local hub cache."""
    if model == DEFAULT_MODEL:
        return default_model_dir()
    local = Path(model).expanduser()
    if local.exists():
        return local
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    found = try_to_load_from_cache(model, "config.json")
    return Path(found).parent if isinstance(found, str) else None


def sharded_learner() -> bool:
    """Whether ``accelerate launch`` runs the learner sharded (FSDP, or DeepSpeed ZeRO stage 3), from the
    environment it gives its processes."""
    return launched_fsdp() or os.environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE", "") == "3"


def preflight(cfg: TrainConfig, cluster: ClusterResources, *, lora: bool = False, learner_processes: int = 1,
              sharded: bool = False, param_count: Optional[int] = None,
              dtype_bytes: Optional[int] = None, log: bool = True) -> PlacementPlan:
    """``plan_placement`` with the model's shape read from its config.json (when it can be found) and the
    dtype from it (else 2 bytes on a GPU run, 4 on CPU); logs the rendered plan unless ``log`` is off."""
    folder = model_dir_of(cfg.model)
    shape = read_model_shape(folder) if folder is not None else None
    if dtype_bytes is None:
        gpu_run = cfg.device == "cuda" or (cfg.device == "auto" and cluster.gpus > 0)
        dtype_bytes = (shape.dtype_bytes if shape and shape.dtype_bytes else None) or (2 if gpu_run else 4)
    plan = plan_placement(cfg, cluster, param_count=param_count or (shape.params if shape else None),
                          dtype_bytes=dtype_bytes, lora=lora, learner_processes=learner_processes,
                          sharded=sharded, shape=shape)
    if log:
        logger.info("pre-flight placement plan\n%s", render_plan(plan))
    return plan


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The options of ``replicalab preflight``."""
    ap.add_argument("--config", help="a TrainConfig YAML (configs/train/...)")
    ap.add_argument("overrides", nargs="*", help="KEY=VALUE config overrides, as for replicalab train")
    ap.add_argument("--ray-address", help="plan for this Ray cluster (default: rollout.ray_address when set)")
    ap.add_argument("--gpus", type=int, help="plan for a cluster given by hand: total GPUs")
    ap.add_argument("--nodes", type=int, default=1, help="with --gpus: nodes (GPUs split evenly)")
    ap.add_argument("--cpus", type=float, help="with --gpus: total CPUs")
    ap.add_argument("--gpu-memory-gib", type=float, help="memory of one GPU (default: nvidia-smi, else unknown)")
    ap.add_argument("--param-count", type=float, help="the model's parameters (default: from its config.json)")
    ap.add_argument("--dtype-bytes", type=int, choices=(2, 4), help="bytes per weight (default: config.json dtype)")
    ap.add_argument("--lora", action="store_true", help="LoRA adapters train (default: lora.enabled)")
    ap.add_argument("--learner-processes", type=int, help="learner processes (default: placement.trainer_gpus, else 1)")
    ap.add_argument("--sharded", action="store_true", help="learner processes shard states (FSDP/ZeRO-3), not DDP")


def run(args: argparse.Namespace) -> str:
    """The rendered plan of ``args`` (``UserInputError`` with one line when the layout cannot work)."""
    from training.config.train import load_train_config

    cfg = load_train_config(args.config, args.overrides)
    address = args.ray_address or cfg.rollout.ray_address
    session = None
    try:
        if args.gpus is not None:
            cluster = ClusterResources(gpus=args.gpus, nodes=args.nodes, cpus=args.cpus,
                                       gpu_memory_gib=args.gpu_memory_gib)
        elif address:
            session = connect(address)
            cluster = ClusterResources.from_ray(args.gpu_memory_gib)
        else:
            cluster = ClusterResources.local(args.gpu_memory_gib)
        trainer = cfg.placement.trainer_gpus
        processes = args.learner_processes or (int(trainer) if trainer != AUTO and int(trainer) else 1)
        plan = preflight(cfg, cluster, lora=args.lora or cfg.lora.enabled, learner_processes=processes,
                         sharded=args.sharded or cfg.learner.sharded or sharded_learner(),
                         param_count=int(args.param_count) if args.param_count else None, dtype_bytes=args.dtype_bytes,
                         log=False)
    finally:
        if session is not None:
            session.close()
    return render_plan(plan)
