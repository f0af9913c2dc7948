"""``TrainConfig``: the one config of ``replicalab train`` (torch-, ray- and trl-free).

YAML files under ``configs/train/`` only override these defaults.  ``load_train_config`` deep-merges a
YAML mapping and then ``a.b.c=value`` overrides into the defaults; an unknown key anywhere fails with
the valid keys of its level.  ``save_resolved`` writes the resolved config next to a run, and loading
that file back gives an equal config.  The defaults describe a tiny run of the embedded ~2M-parameter
model on 2 CPU cores; ``configs/train/gpu.yaml`` shows a GPU run.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Literal, Optional, Sequence

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from replicalab import DIFFICULTIES, TEMPLATES, TRAIN_SEEDS
from replicalab.scenarios import cells
from replicalab.seats import DEFAULT_MODEL, POLICY, ROLES, SCRIPTED, parse_seat
from replicalab.seeds import check_train_seed
from training.config.loading import load_config
from training.config.model import SamplingConfig

_STRICT = ConfigDict(extra="forbid", frozen=True, coerce_numbers_to_str=True)

#: Where a run keeps its checkpoints (``checkpoint-N``), under the run directory.
CHECKPOINTS_DIRNAME = "checkpoints"
#: Loss types TRL 1.16's GRPOConfig accepts (trl/trainer/grpo_config.py, grpo_trainer.py).
LOSS_TYPES = Literal["grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo"]
#: Reward scaling TRL 1.16 accepts (``True`` means "group", ``False`` means "none", as in TRL).
SCALE_REWARDS = Literal["group", "batch", "none"]
LR_SCHEDULERS = Literal["linear", "cosine", "constant", "constant_with_warmup"]
#: New tokens per model turn in rollouts (the longest scripted action is ~410 JSON characters).
ROLLOUT_MAX_NEW_TOKENS = 128


class SeatsConfig(BaseModel):
    """Who plays each role: ``policy`` (the weights being trained; both seats share them),
    ``scripted`` (AdaptiveScientist / ScriptedLabManager), ``scripted:naive|adaptive|reader|random``
    (scientist only) or ``model:DIR`` (a frozen checkpoint).  At least one seat is ``policy``."""

    model_config = _STRICT
    scientist: str = POLICY
    lab_manager: str = SCRIPTED

    @model_validator(mode="after")
    def _check(self) -> "SeatsConfig":
        for role in ROLES:
            parse_seat(role, getattr(self, role), training=True)
        if not self.trained_roles:
            raise ValueError("at least one seat must be 'policy' (the weights being trained)")
        return self

    @property
    def trained_roles(self) -> tuple[str, ...]:
        """Roles whose seat is the trained policy, in ``ROLES`` order."""
        return tuple(r for r in ROLES if getattr(self, r) == POLICY)


class RolloutConfig(BaseModel):
    """How episodes are played: in the driver process or on a pool of Ray actors."""

    model_config = _STRICT
    backend: Literal["inprocess", "ray"] = "ray"
    num_workers: int = Field(default=2, ge=1)
    torch_threads_per_worker: int = Field(default=1, ge=1)
    sampling: SamplingConfig = Field(
        default_factory=lambda: SamplingConfig(temperature=1.0, max_new_tokens=ROLLOUT_MAX_NEW_TOKENS))
    max_rounds: int = Field(default=6, ge=1)
    ray_address: Optional[str] = None  # None: start a local Ray; "auto" or host:port: join a cluster
    max_worker_restarts: int = Field(default=3, ge=0)

    @field_validator("sampling")
    @classmethod
    def _must_sample(cls, v: SamplingConfig) -> SamplingConfig:
        if not v.do_sample:
            raise ValueError("rollout.sampling.do_sample must be true: greedy groups give zero GRPO advantages")
        return v


class GRPOParams(BaseModel):
    """GRPO hyper-parameters, passed on to TRL's ``GRPOConfig`` under the same names.

    One step plays ``groups_per_step`` groups of ``num_generations`` episodes (same seed, role and
    opponent per group).  ``max_completion_length`` bounds the tokens of one role's whole multi-turn
    trajectory.  ``warmup_ratio`` becomes TRL's ``warmup_steps`` (transformers 5 reads a float in
    [0, 1) there as a ratio and has no ``warmup_ratio``).  ``importance_sampling_level="sequence"`` is
    GSPO; TRL expects it with ``loss_type="luspo"``.
    """

    model_config = _STRICT
    num_generations: int = Field(default=8, ge=2)
    groups_per_step: int = Field(default=4, ge=1)
    learning_rate: float = Field(default=2e-4, gt=0.0)
    max_steps: int = Field(default=100, ge=1)
    beta: float = Field(default=0.0, ge=0.0)
    loss_type: LOSS_TYPES = "dapo"
    epsilon: float = Field(default=0.2, gt=0.0)
    epsilon_high: Optional[float] = Field(default=None, gt=0.0)
    num_iterations: int = Field(default=1, ge=1)
    scale_rewards: SCALE_REWARDS = "group"
    importance_sampling_level: Literal["token", "sequence"] = "token"
    max_grad_norm: float = Field(default=1.0, gt=0.0)
    warmup_ratio: float = Field(default=0.0, ge=0.0, lt=1.0)
    lr_scheduler_type: LR_SCHEDULERS = "constant"
    weight_decay: float = Field(default=0.0, ge=0.0)
    max_completion_length: int = Field(default=1024, ge=16)
    gradient_accumulation_steps: int = Field(default=1, ge=1)
    #: Recompute activations in the backward pass (TRL's default is on; it only pays on large models).
    gradient_checkpointing: bool = False

    @field_validator("scale_rewards", mode="before")
    @classmethod
    def _bool_scale(cls, v: Any) -> Any:
        return {True: "group", False: "none"}.get(v, v) if isinstance(v, bool) else v

    @model_validator(mode="after")
    def _check_batch(self) -> "GRPOParams":
        if self.episodes_per_step % self.gradient_accumulation_steps:
            raise ValueError(f"groups_per_step * num_generations ({self.episodes_per_step}) must be divisible by "
                             f"gradient_accumulation_steps ({self.gradient_accumulation_steps})")
        return self

    @property
    def episodes_per_step(self) -> int:
        """Trajectories per optimizer step: ``groups_per_step * num_generations`` (TRL's generation batch)."""
        return self.groups_per_step * self.num_generations


class DataConfig(BaseModel):
    """Which scenarios training draws: every template x difficulty cell, seeds from ``TRAIN_SEEDS``
    after the first ``seed_offset`` of them."""

    model_config = _STRICT
    templates: list[str] = Field(default_factory=lambda: list(TEMPLATES))
    difficulties: list[str] = Field(default_factory=lambda: list(DIFFICULTIES))
    seed_offset: int = Field(default=0, ge=0)
    difficulty_weights: dict[str, float] = Field(
        default_factory=dict,
        description=(
            "Relative share of GRPO groups per difficulty (an unlisted difficulty weighs 1.0; {} = every cell "
            "equally often). The Scientist's one large decision (take the lab's moved technique or revise to "
            "the paper's cross-check method) occurs only on hard cells, so e.g. {hard: 3} spends 3 of every 5 "
            "groups there. Cells follow a smooth weighted round-robin: deterministic and evenly spread."),
    )

    @field_validator("difficulty_weights")
    @classmethod
    def _weights(cls, v: dict[str, float]) -> dict[str, float]:
        unknown = [k for k in v if k not in DIFFICULTIES]
        if unknown:
            raise ValueError(f"difficulty_weights names unknown difficulties {unknown}; valid: {', '.join(DIFFICULTIES)}")
        negative = {k: w for k, w in v.items() if not w >= 0}
        if negative:
            raise ValueError(f"difficulty_weights must be non-negative, got {negative}")
        return v

    @model_validator(mode="after")
    def _some_weight(self) -> "DataConfig":
        if not any(self.difficulty_weights.get(d, 1.0) > 0 for d in self.difficulties):
            raise ValueError("difficulty_weights leave every listed difficulty at weight 0")
        return self

    def cell_schedule(self, n: int) -> list[tuple[str, str]]:
        """The cell of each of ``n`` consecutive groups: every cell in turn, or, with
        ``difficulty_weights``, a smooth weighted round-robin (each cell's share proportional to its
        difficulty's weight, ties broken in ``cells`` order)."""
        cells_ = self.cells
        if not self.difficulty_weights:
            return [cells_[i % len(cells_)] for i in range(n)]
        weights = [self.difficulty_weights.get(d, 1.0) for _, d in cells_]
        total = sum(weights)
        credit = [0.0] * len(cells_)
        out = []
        for _ in range(n):
            credit = [c + w for c, w in zip(credit, weights)]
            best = max(range(len(cells_)), key=lambda k: (credit[k], -k))
            credit[best] -= total
            out.append(cells_[best])
        return out

    @field_validator("templates", "difficulties")
    @classmethod
    def _known(cls, v: list[str], info: Any) -> list[str]:
        valid = TEMPLATES if info.field_name == "templates" else DIFFICULTIES
        if not v:
            raise ValueError(f"{info.field_name} must not be empty; valid choices: {', '.join(valid)}")
        unknown = [x for x in v if x not in valid]
        if unknown:
            raise ValueError(f"unknown {info.field_name} {unknown}; valid choices: {', '.join(valid)}")
        if len(set(v)) != len(v):
            raise ValueError(f"{info.field_name} lists a value twice: {v}")
        return v

    @property
    def cells(self) -> list[tuple[str, str]]:
        """Every (template, difficulty) pair, templates outermost."""
        return cells(self.templates, self.difficulties)


class WandbConfig(BaseModel):
    """Weights & Biases sink (driver only).  ``offline`` needs no key; ``disabled`` imports nothing."""

    model_config = _STRICT
    mode: Literal["offline", "online", "disabled"] = "offline"
    project: str = "replicalab"
    entity: Optional[str] = None
    group: Optional[str] = None
    tags: list[str] = Field(default_factory=list)
    transcripts_per_step: int = Field(default=4, ge=0)


class CheckpointConfig(BaseModel):
    """Checkpoint every ``save_steps`` optimizer steps, keeping the newest ``save_total_limit``."""
    model_config = _STRICT
    save_steps: int = Field(default=10, ge=1)
    save_total_limit: int = Field(default=3, ge=1)


class ValidationConfig(BaseModel):
    """Periodic evaluation on held-out seeds during training (``every_steps=0`` turns it off)."""

    model_config = _STRICT
    every_steps: int = Field(default=0, ge=0)
    episodes: int = Field(default=27, ge=1)


class TrainConfig(BaseModel):
    """Everything one training run needs.  ``bf16=None`` means on exactly when the device is cuda."""

    model_config = _STRICT
    run_name: str = "default"
    output_dir: str = "runs"
    seed: int = 0
    model: str = DEFAULT_MODEL  # a local directory, a Hugging Face id, or "default" (the embedded model)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    bf16: Optional[bool] = None
    seats: SeatsConfig = Field(default_factory=SeatsConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    grpo: GRPOParams = Field(default_factory=GRPOParams)
    data: DataConfig = Field(default_factory=DataConfig)
    wandb: WandbConfig = Field(default_factory=WandbConfig)
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    validation: ValidationConfig = Field(default_factory=ValidationConfig)

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
        if self.bf16 and self.device == "cpu":
            raise ValueError("bf16=true needs device cuda (or auto on a GPU machine)")
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
    def num_train_rows(self) -> int:
        """Dataset rows (GRPO groups) the whole run consumes: ``max_steps * groups_per_step``."""
        return self.grpo.max_steps * self.grpo.groups_per_step

    def resolve_bf16(self, device: str) -> bool:
        """bf16 for the resolved device ("cpu" or "cuda"): the explicit value, else on for cuda."""
        return self.bf16 if self.bf16 is not None else device == "cuda"


def train_rows(cfg: TrainConfig, n: int) -> list[dict[str, Any]]:
    """``n`` dataset rows ``{seed, role, template, difficulty}``, one per GRPO group.

    Deterministic from ``cfg.seed``.  Seeds are distinct and come only from ``TRAIN_SEEDS`` after
    ``cfg.data.seed_offset``; roles cycle over ``cfg.seats.trained_roles`` and, for each full cycle of
    roles, the (template, difficulty) cell advances along ``cfg.data.cell_schedule`` (every cell in
    turn unless ``data.difficulty_weights`` oversamples some difficulties).
    """
    if n < 0:
        raise ValueError(f"n must be non-negative, got {n}")
    room = max(len(TRAIN_SEEDS) - cfg.data.seed_offset, 0)
    if n > room:
        raise ValueError(f"{n} rows need {n} distinct training seeds; seed_offset leaves {room}")
    rng = random.Random(cfg.seed)
    picks = rng.sample(range(room), n)
    roles = cfg.seats.trained_roles
    schedule = cfg.data.cell_schedule(-(-n // len(roles)))
    rows = []
    for i, pick in enumerate(picks):
        template, difficulty = schedule[i // len(roles)]
        seed = check_train_seed(TRAIN_SEEDS[cfg.data.seed_offset + pick])
        rows.append({"seed": seed, "role": roles[i % len(roles)], "template": template, "difficulty": difficulty})
    return rows


def load_train_config(path: str | Path | None, overrides: Sequence[str] = ()) -> TrainConfig:
    """The ``TrainConfig`` of a YAML file plus ``a.b.c=value`` overrides (see ``load_config``)."""
    return load_config(TrainConfig, path, overrides)


