"""``LearnerConfig``: how the learner's processes share the model, how long they wait for each other, and
which signals stop a run gracefully (torch-free).

Hung on ``TrainConfig`` as ``learner:``.  ``sharding`` is the one switch between a replicated learner and a
sharded one; the launcher stays ``torchrun`` (or ``accelerate launch`` without a sharding config of its own):

- ``none``: every learner process holds the whole model (DDP with several processes);
- ``fsdp``: PyTorch FSDP (version 2, full shard), turned on through TRL's ``GRPOConfig(fsdp=..., fsdp_config=...)``;
  checkpoints are written as ``fsdp_checkpoint`` says;
- ``zero3``: DeepSpeed ZeRO stage 3 through ``GRPOConfig(deepspeed=...)`` (DeepSpeed must be installed);
  ``deepspeed_config`` names a JSON file to start from, else a stage-3 config with ``auto`` values is used.
  The weights sent to the rollout workers each step and ``final/`` are gathered from the shards, which
  DeepSpeed does only with ``stage3_gather_16bit_weights_on_model_save``: it is turned on when the file
  leaves it out, and a file that turns it off is refused (``training.trainer.sharding``).
"""

from __future__ import annotations

import signal
from typing import Literal, Optional

from pydantic import BaseModel, Field, field_validator

from training.config.loading import STRICT

#: What ``learner.timeout_minutes`` defaults to: rank 0 alone may spend this long on driver work (starting
#: the rollout workers, the vLLM check, hashing a large checkpoint) while the others wait in a collective.
DEFAULT_TIMEOUT_MINUTES = 60.0
#: The signals that stop a run gracefully by default: Ctrl-C, a scheduler's stop, and SLURM's warning
#: (``sbatch --signal=B:USR1@SECONDS``) that the time limit is near.
DEFAULT_STOP_SIGNALS = ("SIGINT", "SIGTERM", "SIGUSR1")


class LearnerConfig(BaseModel):
    """The learner's processes: sharding, the process group's timeout and the graceful-stop signals."""

    model_config = STRICT
    sharding: Literal["none", "fsdp", "zero3"] = Field(default="none", description=(
        "How learner processes share the model: none (each holds it all; DDP with several processes), fsdp "
        "(PyTorch FSDP2, full shard), zero3 (DeepSpeed ZeRO-3; needs deepspeed). Launch with torchrun "
        "--nproc_per_node N (or accelerate launch without an FSDP/DeepSpeed config of its own)."))
    fsdp_checkpoint: Literal["sharded", "full"] = Field(default="sharded", description=(
        "With sharding=fsdp, how checkpoints hold the weights and optimizer: sharded (each process writes its "
        "shard: pytorch_model_fsdp_0/, optimizer_0/) or full (gathered on the main process: "
        "pytorch_model_fsdp.bin, optimizer.bin, model.safetensors). final/ is always a full model."))
    deepspeed_config: Optional[str] = Field(default=None, description=(
        "With sharding=zero3, a DeepSpeed JSON config to start from (its zero_optimization.stage must be 3); "
        "None: stage 3 with auto batch sizes, clipping and bf16. stage3_gather_16bit_weights_on_model_save is "
        "turned on when missing (the weight sync and final/ need it) and refused when false."))
    timeout_minutes: float = Field(default=DEFAULT_TIMEOUT_MINUTES, gt=0.0, description=(
        "How long a learner process waits in a collective (the process group's timeout) before failing: the "
        "others wait while the main process alone starts the rollout workers, checks vLLM or hashes a "
        "checkpoint. torch's own default is 10 minutes with NCCL, 30 with gloo."))
    stop_signals: list[str] = Field(default_factory=lambda: list(DEFAULT_STOP_SIGNALS), description=(
        "Signals that save a checkpoint at the next step boundary and stop (a second one aborts). SIGUSR1 is "
        "SLURM's warning before the time limit (launch/slurm.sbatch asks for it with --signal)."))

    @field_validator("stop_signals")
    @classmethod
    def _signals(cls, v: list[str]) -> list[str]:
        names = [s.strip().upper() for s in v]
        names = [n if n.startswith("SIG") else f"SIG{n}" for n in names]
        valid = {s.name for s in signal.Signals}
        unknown = [n for n in names if n not in valid]
        if unknown:
            raise ValueError(f"learner.stop_signals: unknown signal(s) {unknown}; e.g. SIGINT, SIGTERM, SIGUSR1")
        if "SIGKILL" in names or "SIGSTOP" in names:
            raise ValueError("learner.stop_signals: SIGKILL and SIGSTOP cannot be caught")
        if not names:
            raise ValueError("learner.stop_signals must name at least one signal (e.g. SIGINT)")
        return list(dict.fromkeys(names))

    @property
    def sharded(self) -> bool:
        """Whether the learner's processes shard weights, gradients and optimizer states (not DDP)."""
        return self.sharding != "none"

    @property
    def timeout_seconds(self) -> int:
        return int(round(self.timeout_minutes * 60))

    def signal_numbers(self) -> tuple[int, ...]:
        """``stop_signals`` as signal numbers."""
        return tuple(int(signal.Signals[name]) for name in self.stop_signals)
