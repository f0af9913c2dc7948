"""A sharded learner (``learner.sharding``) as the arguments TRL's ``GRPOConfig`` takes, and the checks made
before anything starts.

``sharding_kwargs(learner)`` gives the ``GRPOConfig`` keywords: ``ddp_timeout`` (the process group's
timeout, every sharding) and ``fsdp``/``fsdp_config`` (FSDP2, full shard, checkpoints sharded or full) or
``deepspeed`` (a ZeRO-3 config, ``zero3_config``).  ``check_learner(learner)`` refuses, with one line, a
launcher whose own sharding disagrees with the config (``accelerate launch`` with an FSDP or DeepSpeed
config of its own), ZeRO-3 without DeepSpeed installed, and a DeepSpeed config that is not stage 3 or
turns the 16-bit weight gather off.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
from pathlib import Path
from typing import Any, Optional

from training.cluster.launcher import launched_fsdp
from training.config.learner import LearnerConfig
from training.errors import UserInputError

logger = logging.getLogger(__name__)

#: The DeepSpeed key without which ZeRO-3 cannot hand out whole weights (the weight sync, ``final/``).
ZERO3_GATHER_KEY = "stage3_gather_16bit_weights_on_model_save"
#: ZeRO-3 when no ``learner.deepspeed_config`` is given: TRL/accelerate fill every ``auto`` from the run.
ZERO3_DEFAULT: dict[str, Any] = {
    "zero_optimization": {"stage": 3, "overlap_comm": True, "contiguous_gradients": True, ZERO3_GATHER_KEY: True},
    "bf16": {"enabled": "auto"},
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
}
#: ``learner.fsdp_checkpoint`` -> accelerate's state-dict type of FSDP checkpoints.
FSDP_STATE_DICT_TYPES = {"sharded": "SHARDED_STATE_DICT", "full": "FULL_STATE_DICT"}
#: What only ``accelerate launch`` puts in its processes' environment when its own config uses DeepSpeed
#: (accelerate/utils/launch.py; an Accelerator built in this process sets ACCELERATE_USE_DEEPSPEED itself).
#: FSDP: ``training.cluster.launcher.launched_fsdp``.
LAUNCHED_DEEPSPEED_ENV = "ACCELERATE_CONFIG_DS_FIELDS"


def fsdp_config(learner: LearnerConfig) -> dict[str, Any]:
    """``GRPOConfig.fsdp_config`` of an FSDP learner: FSDP2 wrapping each transformer layer (the model's
    ``_no_split_modules``), parameters resharded after the forward pass (full shard)."""
    return {"version": 2, "reshard_after_forward": True, "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "state_dict_type": FSDP_STATE_DICT_TYPES[learner.fsdp_checkpoint]}


def zero3_config(path: Optional[str]) -> dict[str, Any]:
    """The DeepSpeed config of a ZeRO-3 learner: ``path``'s JSON (``ZERO3_DEFAULT`` when None) with
    ``stage3_gather_16bit_weights_on_model_save`` turned on when it is missing.  ``UserInputError`` when the
    file is missing or not JSON, its stage is not 3, or it turns the gather off."""
    if path is None:
        return json.loads(json.dumps(ZERO3_DEFAULT))  # a copy the trainer may fill in
    file = Path(path).expanduser()
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserInputError(f"learner.deepspeed_config {path}: no such file") from None
    except (OSError, ValueError) as exc:
        raise UserInputError(f"learner.deepspeed_config {path} is not a readable JSON file ({exc})") from None
    zero = config.get("zero_optimization") if isinstance(config, dict) else None
    if not isinstance(zero, dict) or zero.get("stage") != 3:
        stage = zero.get("stage") if isinstance(zero, dict) else None
        raise UserInputError(f"learner.deepspeed_config {path} has zero_optimization.stage {stage!r}; "
                             "learner.sharding=zero3 needs stage 3")
    if zero.get(ZERO3_GATHER_KEY) is False:
        raise UserInputError(f"learner.deepspeed_config {path} sets zero_optimization.{ZERO3_GATHER_KEY}: false; "
                             "the rollout workers' weights and final/ are gathered from the shards, which needs it "
                             "true (remove the key or set it true)")
    if ZERO3_GATHER_KEY not in zero:
        logger.info("learner.deepspeed_config %s: %s turned on (the weight sync gathers whole weights)", path,
                    ZERO3_GATHER_KEY)
        zero[ZERO3_GATHER_KEY] = True
    return config


def sharding_kwargs(learner: LearnerConfig) -> dict[str, Any]:
    """The ``GRPOConfig`` keywords of ``learner``: the process group's timeout, and FSDP or DeepSpeed."""
    kwargs: dict[str, Any] = {"ddp_timeout": learner.timeout_seconds}
    if learner.sharding == "fsdp":
        kwargs.update(fsdp=True, fsdp_config=fsdp_config(learner))
    elif learner.sharding == "zero3":
        kwargs["deepspeed"] = zero3_config(learner.deepspeed_config)
    return kwargs


def check_learner(learner: LearnerConfig) -> None:
    """Refuse, with one line, what cannot start: a launcher sharding the model its own way, ZeRO-3 without
    DeepSpeed, a DeepSpeed config ``zero3_config`` refuses."""
    launched = ("fsdp" if launched_fsdp()
                else "zero3" if LAUNCHED_DEEPSPEED_ENV in os.environ else None)
    if launched is not None and launched != learner.sharding:
        raise UserInputError(f"launched by accelerate with its own {launched} config but learner.sharding="
                             f"{learner.sharding}; the train config is the one switch: launch without accelerate's "
                             f"sharding config (or torchrun) and set learner.sharding={launched}")
    if learner.sharding == "zero3":
        if importlib.util.find_spec("deepspeed") is None:
            raise UserInputError("learner.sharding=zero3 needs DeepSpeed, which is not installed (pip install "
                                 "deepspeed on the GPU machine), or use learner.sharding=fsdp")
        zero3_config(learner.deepspeed_config)


def check_sharded(trainer: Any, learner: LearnerConfig) -> None:
    """Refuse, with one line, a trainer that does not shard as ``learner.sharding`` says: accelerate 1.15
    turns FSDP on only for several processes on GPU-class devices (``AcceleratorState``: one process or
    ``use_cpu`` trains unsharded), and would run DDP silently."""
    got = ("fsdp" if getattr(trainer, "is_fsdp_enabled", False)
           else "zero3" if getattr(trainer, "is_deepspeed_enabled", False) else "none")
    if got != learner.sharding:
        raise UserInputError(f"learner.sharding={learner.sharding} but accelerate built a {got} learner ("
                             f"{trainer.accelerator.distributed_type.value}); sharding needs several learner "
                             "processes on GPUs: torchrun --nproc_per_node N on a GPU node")
