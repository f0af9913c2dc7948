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
from typing import Any, Literal, Optional, Sequence, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from replicalab import DIFFICULTIES, TEMPLATES, TRAIN_SEEDS
from replicalab.agents import SCRIPTED_SCIENTISTS as SCRIPTED_BY_NAME
from replicalab.seeds import check_train_seed
from training.model_config import SamplingConfig

_STRICT = ConfigDict(extra="forbid", frozen=True, coerce_numbers_to_str=True)

#: File name of the resolved config inside a run directory.
RESOLVED_CONFIG_NAME = "config.yaml"
#: Where a run keeps its checkpoints (``checkpoint-N``), under the run directory.
CHECKPOINTS_DIRNAME = "checkpoints"
#: ``model`` value meaning the embedded default model.
DEFAULT_MODEL = "default"
ROLES: tuple[str, ...] = ("scientist", "lab_manager")
#: Seat values.  ``scripted:<kind>`` and ``model:<dir>`` take an argument after the colon.
POLICY_SEAT = "policy"
SCRIPTED_SEAT = "scripted"
MODEL_SEAT_PREFIX = "model:"
#: Scripted Scientists a ``scripted:<kind>`` scientist seat may name in training; plain ``scripted`` is the
#: first.  The oracle is left out: it plays from the hidden reference.
SCRIPTED_SCIENTISTS: tuple[str, ...] = ("adaptive", *(n for n in SCRIPTED_BY_NAME if n not in ("adaptive", "oracle")))
#: Loss types TRL 1.16's GRPOConfig accepts (trl/trainer/grpo_config.py, grpo_trainer.py).
LOSS_TYPES = Literal["grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo"]
#: Reward scaling TRL 1.16 accepts (``True`` means "group", ``False`` means "none", as in TRL).
SCALE_REWARDS = Literal["group", "batch", "none"]
LR_SCHEDULERS = Literal["linear", "cosine", "constant", "constant_with_warmup"]
#: New tokens per model turn in rollouts (the longest scripted action is ~410 JSON characters).
ROLLOUT_MAX_NEW_TOKENS = 128


def parse_seat(role: str, spec: str) -> tuple[str, str]:
    """Split a seat value into ``(kind, argument)``: ``("policy", "")``, ``("scripted", "adaptive")``
    (the scientist's scripted kind; ``""`` for the Lab Manager) or ``("model", DIR)``.  Raises
    ValueError naming the valid values."""
    scripted = [f"scripted:{k}" for k in SCRIPTED_SCIENTISTS] if role == "scientist" else []
    valid = "valid values: " + ", ".join([POLICY_SEAT, SCRIPTED_SEAT, *scripted, MODEL_SEAT_PREFIX + "DIR"])
    if spec == POLICY_SEAT:
        return POLICY_SEAT, ""
    if spec == SCRIPTED_SEAT:
        return SCRIPTED_SEAT, SCRIPTED_SCIENTISTS[0] if role == "scientist" else ""
    if spec.startswith(SCRIPTED_SEAT + ":"):
        kind = spec.split(":", 1)[1]
        if role != "scientist":
            raise ValueError(f"{role} seat {spec!r}: only the scientist seat takes scripted:<kind>; {valid}")
        if kind not in SCRIPTED_SCIENTISTS:
            raise ValueError(f"scientist seat {spec!r}: unknown scripted kind {kind!r}; {valid}")
        return SCRIPTED_SEAT, kind
    if spec.startswith(MODEL_SEAT_PREFIX) and spec[len(MODEL_SEAT_PREFIX):].strip():
        return "model", spec[len(MODEL_SEAT_PREFIX):].strip()
    raise ValueError(f"{role} seat {spec!r} is not a seat; {valid}")


class SeatsConfig(BaseModel):
    """Who plays each role: ``policy`` (the weights being trained; both seats share them),
    ``scripted`` (AdaptiveScientist / ScriptedLabManager), ``scripted:naive|adaptive|reader|random``
    (scientist only) or ``model:DIR`` (a frozen checkpoint).  At least one seat is ``policy``."""

    model_config = _STRICT
    scientist: str = POLICY_SEAT
    lab_manager: str = SCRIPTED_SEAT

    @model_validator(mode="after")
    def _check(self) -> "SeatsConfig":
        for role in ROLES:
            parse_seat(role, getattr(self, role))
        if not self.trained_roles:
            raise ValueError("at least one seat must be 'policy' (the weights being trained)")
        return self

    @property
    def trained_roles(self) -> tuple[str, ...]:
        """Roles whose seat is the trained policy, in ``ROLES`` order."""
        return tuple(r for r in ROLES if getattr(self, r) == POLICY_SEAT)


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
        return [(t, d) for t in self.templates for d in self.difficulties]


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


class EvalConfig(BaseModel):
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
    eval: EvalConfig = Field(default_factory=EvalConfig)

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


def latest_checkpoint(checkpoints_dir: Path) -> Path | None:
    """The ``checkpoint-N`` with the highest N under ``checkpoints_dir``, or None."""
    ckpts = sorted(Path(checkpoints_dir).glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    return ckpts[-1] if ckpts else None


def train_rows(cfg: TrainConfig, n: int) -> list[dict[str, Any]]:
    """``n`` dataset rows ``{seed, role, template, difficulty}``, one per GRPO group.

    Deterministic from ``cfg.seed``.  Seeds are distinct and come only from ``TRAIN_SEEDS`` after
    ``cfg.data.seed_offset``; roles cycle over ``cfg.seats.trained_roles`` and, for each full cycle of
    roles, the (template, difficulty) cell advances over ``cfg.data.cells``.
    """
    if n < 0:
        raise ValueError(f"n must be non-negative, got {n}")
    room = max(len(TRAIN_SEEDS) - cfg.data.seed_offset, 0)
    if n > room:
        raise ValueError(f"{n} rows need {n} distinct training seeds; seed_offset leaves {room}")
    rng = random.Random(cfg.seed)
    picks = rng.sample(range(room), n)
    roles, cells = cfg.seats.trained_roles, cfg.data.cells
    rows = []
    for i, pick in enumerate(picks):
        template, difficulty = cells[(i // len(roles)) % len(cells)]
        seed = check_train_seed(TRAIN_SEEDS[cfg.data.seed_offset + pick])
        rows.append({"seed": seed, "role": roles[i % len(roles)], "template": template, "difficulty": difficulty})
    return rows


# ----- loading ----------------------------------------------------------------------------------
ConfigT = TypeVar("ConfigT", bound=BaseModel)


class ConfigError(ValueError):
    """A config file or override that cannot be applied (unknown key, malformed override, not a mapping)."""


def _merge(base: dict[str, Any], update: dict[str, Any], where: str, source: str) -> None:
    """Deep-merge ``update`` into ``base`` in place; a key unknown to ``base`` fails."""
    for key, value in update.items():
        path = f"{where}.{key}" if where else str(key)
        if key not in base:
            level = f"under '{where}'" if where else "at the top level"
            raise ConfigError(f"unknown key '{path}' in {source}; valid keys {level}: {', '.join(base)}")
        if isinstance(base[key], dict) and base[key] and isinstance(value, dict):
            # a nested config section (its dump is never empty); an empty default is a free-form mapping
            _merge(base[key], value, path, source)
        else:
            base[key] = value


def _parse_override(text: str) -> dict[str, Any]:
    key, sep, raw = text.partition("=")
    parts = key.strip().split(".")
    if not sep or not all(p.strip() for p in parts):
        raise ConfigError(f"malformed override {text!r}: expected KEY=VALUE with a dotted key, e.g. grpo.beta=0.04")
    value: Any = yaml.safe_load(raw)
    for part in reversed(parts):
        value = {part.strip(): value}
    return value


def load_config(cls: type[ConfigT], path: str | Path | None, overrides: Sequence[str] = ()) -> ConfigT:
    """Defaults of ``cls``, deep-merged with the YAML mapping at ``path`` (None or an empty file: no
    change), then with each ``a.b.c=value`` override (value parsed as YAML), validated."""
    data = cls.model_construct().model_dump(mode="python")  # defaults, not yet validated
    if path is not None:
        loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{path}: a config file must hold a mapping of keys, got {type(loaded).__name__}")
        _merge(data, loaded or {}, "", str(path))
    for text in overrides:
        _merge(data, _parse_override(text), "", f"override {text!r}")
    return cls.model_validate(data)


def load_train_config(path: str | Path | None, overrides: Sequence[str] = ()) -> TrainConfig:
    """The ``TrainConfig`` of a YAML file plus ``a.b.c=value`` overrides (see ``load_config``)."""
    return load_config(TrainConfig, path, overrides)


def save_resolved(cfg: BaseModel, run_dir: str | Path) -> Path:
    """Write ``cfg`` to ``<run_dir>/config.yaml`` (every field, defaults included) and return the path."""
    out = Path(run_dir) / RESOLVED_CONFIG_NAME
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False), encoding="utf-8")
    return out
