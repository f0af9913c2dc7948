"""``TrainConfig``: the one config of ``replicalab train`` (torch-, ray- and trl-free).

YAML files under ``configs/train/`` only override these defaults.  ``load_train_config`` deep-merges a
YAML mapping and then ``a.b.c=value`` overrides into the defaults; an unknown key anywhere fails with
the valid keys of its level.  ``save_resolved`` writes the resolved config next to a run, and loading
that file back gives an equal config.  The defaults describe a tiny run of the embedded ~2M-parameter
model on 2 CPU cores; ``configs/train/gpu.yaml`` shows a GPU run.  Each section has its own module:
``seats``, ``rollout``, ``grpo``, ``data``, ``tracking`` (``wandb``), ``checkpoint``, ``validation``, ``lora``,
``placement`` and ``learner``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Optional, Sequence

from pydantic import BaseModel, Field, field_validator, model_validator

from replicalab import TRAIN_SEEDS
from replicalab.seats import DEFAULT_MODEL
from training.config.checkpoint import CheckpointConfig
from training.config.data import DataConfig
from training.config.grpo import GRPOParams
from training.config.learner import LearnerConfig
from training.config.loading import STRICT_NUMBERS_AS_STR, load_config
from training.config.lora import LoraConfig
from training.config.placement import PlacementConfig
from training.config.rollout import RolloutConfig
from training.config.seats import SeatsConfig
from training.config.tracking import WandbConfig
from training.config.validation import ValidationConfig
from training.errors import UserInputError

#: Where a run keeps its checkpoints (``checkpoint-N``), under the run directory.
CHECKPOINTS_DIRNAME = "checkpoints"
#: The learner's weight dtypes (``dtype``; TRL's ``model_init_kwargs``), ``auto`` resolved by ``resolve_dtype``.
LEARNER_DTYPES = Literal["auto", "float32", "bfloat16", "float16"]


class TrainConfig(BaseModel):
    """Everything one training run needs.  ``bf16=None`` means on exactly when the device is cuda."""

    model_config = STRICT_NUMBERS_AS_STR
    run_name: str = Field(default="default", description=(
        "Name of the run: its directory under output_dir and its W&B run name (a plain directory name)."))
    output_dir: str = Field(default="runs", description=(
        "Parent directory of run directories; the run writes output_dir/run_name."))
    seed: int = Field(default=0, ge=0, description=(
        "Seeds the training rows (which seeds, in which order), TRL's shuffling and every step's sampling."))
    model: str = Field(default=DEFAULT_MODEL, description=(
        "Starting weights: a local checkpoint directory, a Hugging Face id, or 'default' (the embedded "
        "model, built on first use)."))
    chat_template: Optional[str] = Field(default=None, description=(
        "Chat template for model seats whose tokenizer has none (a base model): a Jinja file path or a "
        "built-in name (chatml). Used in memory; a tokenizer's own template always wins."))
    lora: LoraConfig = Field(default_factory=lambda: LoraConfig(), description=(
        "Train LoRA adapters (PEFT) instead of every weight."))
    device: Literal["auto", "cpu", "cuda"] = Field(default="auto", description=(
        "Training device: auto picks cuda when available, else cpu; cuda without a GPU fails."))
    deterministic: bool = Field(default=False, description=(
        "PyTorch's deterministic algorithms in the learner process and its in-process rollouts (transformers' "
        "enable_full_determinism: use_deterministic_algorithms, CUBLAS_WORKSPACE_CONFIG, cuDNN deterministic, "
        "CUDA_LAUNCH_BLOCKING), so a CUDA run resumes bitwise, at a speed cost. Off, a CUDA resume matches within "
        "sampling noise: cuBLAS may pick other kernels after a restart. CPU runs are deterministic either way."))
    bf16: Optional[bool] = Field(default=None, description=(
        "Train in bfloat16 mixed precision; None: on exactly when the device is cuda."))
    dtype: LEARNER_DTYPES = Field(default="auto", description=(
        "The learner's weights as TRL loads them (the reference model's too): auto, float32, bfloat16 or float16. "
        "auto: bfloat16 for the frozen base of a LoRA run on cuda, else float32. Full fine-tuning keeps float32 "
        "weights (torch's AdamW keeps its moments in the weights' dtype, so they stay float32; bf16 computes in "
        "bfloat16); a 16-bit dtype is for LoRA, whose adapters and their AdamW state PEFT keeps in float32."))
    seats: SeatsConfig = Field(default_factory=SeatsConfig, description="Who plays each role.")
    rollout: RolloutConfig = Field(default_factory=RolloutConfig, description="How episodes are played.")
    grpo: GRPOParams = Field(default_factory=GRPOParams, description="GRPO hyper-parameters (TRL GRPOConfig).")
    data: DataConfig = Field(default_factory=DataConfig, description="Which scenarios training draws.")
    wandb: WandbConfig = Field(default_factory=WandbConfig, description="Weights & Biases logging.")
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig, description="Checkpoint schedule.")
    validation: ValidationConfig = Field(default_factory=ValidationConfig, description=(
        "Periodic validation check during training (val/* metrics)."))
    placement: PlacementConfig = Field(default_factory=PlacementConfig, description=(
        "GPUs and CPUs of the learner and each rollout worker, and the Ray placement strategy (planned before "
        "anything loads)."))
    learner: LearnerConfig = Field(default_factory=LearnerConfig, description=(
        "The learner's processes: sharding (none, fsdp, zero3), their collective timeout and the signals that "
        "stop a run gracefully."))

    @field_validator("run_name", "model", "output_dir")
    @classmethod
    def _non_empty(cls, v: str, info: Any) -> str:
        if not v.strip():
            raise ValueError(f"{info.field_name} must be a non-empty string")
        if info.field_name == "run_name" and ("/" in v or "\\" in v or v in (".", "..")):
            raise ValueError(f"run_name {v!r} must be a plain directory name")
        return v

    @model_validator(mode="after")
    def _check(self) -> "TrainConfig":
        branch = self.grpo.branch
        if self.grpo.group_by == "turn" and branch.temperature is not None and branch.tokens != "reply":
            raise ValueError("grpo.branch.temperature samples the branched reply alone at its own temperature: it "
                             "needs grpo.branch.tokens=reply")
        if self.bf16 and self.device == "cpu":
            raise ValueError("bf16=true needs device cuda (or auto on a GPU machine)")
        if self.dtype in ("bfloat16", "float16") and not self.lora.enabled:
            raise ValueError(f"dtype={self.dtype} with full fine-tuning would keep AdamW's moments in {self.dtype} "
                             "(torch keeps them in the weights' dtype); use dtype=float32 (bf16=true computes in "
                             "bfloat16) or lora.enabled=true")
        if self.rollout.engine == "vllm" and self.lora.enabled:
            raise ValueError("lora.enabled=true with rollout.engine=vllm is not supported (the engine loads full "
                             "weights each step); use rollout.engine=hf for LoRA runs")
        if self.lora.enabled and self.learner.sharded:
            raise ValueError(f"lora.enabled=true with learner.sharding={self.learner.sharding} is not supported (the "
                             "adapter is merged and shipped from an unsharded model); LoRA runs use learner.sharding=none")
        if self.rollout.max_staleness and self.rollout.vllm.sleep_between_steps:
            raise ValueError("rollout.vllm.sleep_between_steps needs rollout.max_staleness=0 (an engine playing ahead "
                             "is awake while the learner trains)")
        if self.rollout.max_staleness and self.grpo.num_iterations > 1:
            raise ValueError("rollout.max_staleness>0 needs grpo.num_iterations=1 (a batch played ahead is trained on "
                             "once)")
        if self.rollout.sampling.max_new_tokens > self.grpo.max_completion_length:
            raise ValueError("rollout.sampling.max_new_tokens exceeds grpo.max_completion_length")
        room = max(len(TRAIN_SEEDS) - self.data.seed_offset, 0)
        if self.num_train_rows > room:
            raise ValueError(f"the run needs {self.num_train_rows} training seeds (max_steps * groups_per_step) "
                             f"but data.seed_offset {self.data.seed_offset} leaves only {room} in TRAIN_SEEDS")
        return self

    @property
    def run_dir(self) -> Path:
        return Path(self.output_dir) / self.run_name

    @property
    def checkpoints_dir(self) -> Path:
        return self.run_dir / CHECKPOINTS_DIRNAME

    @property
    def validation_opponents(self) -> dict[str, list[str]]:
        """Trained role -> the fixed opponents its validation plays (``validation.opponents``; none when off)."""
        if not self.validation.every_steps:
            return {}
        return {role: list(self.validation.opponents.get(role, ())) for role in self.seats.trained_roles
                if self.validation.opponents.get(role)}

    @property
    def opponent_seats(self) -> tuple[str, ...]:
        """Every seat spec a job may name as its opponent: the pools' members and the validation opponents."""
        seats = [*self.seats.pool_seats, *(s for specs in self.validation_opponents.values() for s in specs)]
        return tuple(dict.fromkeys(seats))

    @property
    def num_train_rows(self) -> int:
        """Dataset rows (GRPO groups) the whole run consumes: ``max_steps * groups_per_step``."""
        return self.grpo.max_steps * self.grpo.groups_per_step

    def per_process_batch(self, processes: int) -> int:
        """Episodes each of ``processes`` learner processes scores per micro-step, so that a step is
        ``grpo.episodes_per_step`` episodes over all of them; ``UserInputError`` when they do not divide."""
        g = self.grpo
        share = g.gradient_accumulation_steps * processes
        if g.episodes_per_step % share:
            raise UserInputError(
                f"grpo.episodes_per_step={g.episodes_per_step} does not split over {processes} learner process(es) "
                f"x grpo.gradient_accumulation_steps={g.gradient_accumulation_steps}: use a multiple of {share}")
        return g.episodes_per_step // share

    def resolve_bf16(self, device: str) -> bool:
        """bf16 for the resolved device ("cpu" or "cuda"): the explicit value, else on for cuda."""
        return self.bf16 if self.bf16 is not None else device == "cuda"

    @property
    def scoring_temperature(self) -> float:
        """The temperature the trainer scores the trained tokens at: the one they were sampled at (the branched
        reply's, ``grpo.branch.temperature``, when set; else the rollouts')."""
        branch = self.grpo.branch
        if self.grpo.group_by == "turn" and branch.temperature is not None:
            return branch.temperature
        return self.rollout.sampling.temperature

    def resolve_dtype(self, device: str, lora: Optional[bool] = None) -> str:
        """The learner's weight dtype for the resolved device ("cpu" or "cuda"): the explicit value, else bfloat16
        for a LoRA base on cuda, float32 otherwise (``lora``: whether LoRA trains; None: ``lora.enabled``)."""
        if self.dtype != "auto":
            return self.dtype
        lora = self.lora.enabled if lora is None else lora
        return "bfloat16" if lora and device == "cuda" else "float32"


def load_train_config(path: str | Path | None, overrides: Sequence[str] = ()) -> TrainConfig:
    """The ``TrainConfig`` of a YAML file plus ``a.b.c=value`` overrides (see ``load_config``)."""
    return load_config(TrainConfig, path, overrides)


