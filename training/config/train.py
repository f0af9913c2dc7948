"""``TrainConfig``: the one config of ``replicalab train`` (torch-, ray- and trl-free).

YAML files under ``configs/train/`` only override these defaults.  ``load_train_config`` deep-merges a
YAML mapping and then ``a.b.c=value`` overrides into the defaults; an unknown key anywhere fails with
the valid keys of its level.  ``save_resolved`` writes the resolved config next to a run, and loading
that file back gives an equal config.  The defaults describe a tiny run of the embedded ~2M-parameter
model on 2 CPU cores; ``configs/train/gpu.yaml`` shows a GPU run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Optional, Sequence

from pydantic import BaseModel, Field, field_validator, model_validator

from replicalab import DIFFICULTIES, TEMPLATES, TRAIN_SEEDS, VALIDATION_SEEDS
from replicalab.scenarios import cells
from replicalab.seats import DEFAULT_MODEL, POLICY, ROLES, SCRIPTED, other_role, parse_seat
from training.config.branch import BranchConfig, GroupBy
from training.config.learner import LearnerConfig
from training.config.loading import STRICT_NUMBERS_AS_STR, load_config
from training.config.model import SamplingConfig, VLLMConfig
from training.config.placement import PlacementConfig
from training.config.pool import SNAPSHOT, PoolMember, SnapshotConfig, check_pool
from training.errors import UserInputError

#: Where a run keeps its checkpoints (``checkpoint-N``), under the run directory.
CHECKPOINTS_DIRNAME = "checkpoints"
#: Loss types TRL 1.16's GRPOConfig accepts (trl/trainer/grpo_config.py, grpo_trainer.py).
LOSS_TYPES = Literal["grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo"]
#: Reward scaling TRL 1.16 accepts (``True`` means "group", ``False`` means "none", as in TRL).
SCALE_REWARDS = Literal["group", "batch", "none"]
LR_SCHEDULERS = Literal["linear", "cosine", "constant", "constant_with_warmup"]
#: The learner's weight dtypes (``dtype``; TRL's ``model_init_kwargs``), ``auto`` resolved by ``resolve_dtype``.
LEARNER_DTYPES = Literal["auto", "float32", "bfloat16", "float16"]
#: New tokens per model turn in rollouts (the longest scripted action is ~410 JSON characters).
ROLLOUT_MAX_NEW_TOKENS = 128


class SeatsConfig(BaseModel):
    """Who plays each role: ``policy`` (the weights being trained; both seats share them), ``scripted``
    (the role's default scripted agent), ``scripted:NAME`` (a named scripted agent, ``replicalab.seats``) or
    ``model:DIR`` (a frozen checkpoint).  At least one seat is ``policy``.  Each seat trains on its own
    role's reward."""

    model_config = STRICT_NUMBERS_AS_STR
    scientist: str = Field(default=POLICY, description=(
        "Seat of the Scientist: policy (trained), scripted (scripted:naive), scripted:NAME (naive, "
        "a skill combination such as reader, defender+asker or reader+defender+asker, random), "
        "or model:DIR (a frozen checkpoint or Hugging Face id)."))
    lab_manager: str = Field(default=SCRIPTED, description=(
        "Seat of the Lab Manager: policy (trained, sharing the Scientist's weights if both train), scripted "
        "(scripted:thrifty), scripted:cooperative, scripted:thrifty or model:DIR (frozen)."))
    pools: dict[Literal["scientist", "lab_manager"], list[PoolMember]] = Field(default_factory=dict, description=(
        "Opponent pools: pools.ROLE lists who plays ROLE in the episodes the other (trained) seat learns from, "
        "each drawn per GRPO group with its weight (training.config.pool). A role without a pool is played "
        "by its seat."))
    snapshots: SnapshotConfig = Field(default_factory=SnapshotConfig, description=(
        "Frozen snapshots of the policy that pools draw as 'snapshot'."))

    @model_validator(mode="after")
    def _check(self) -> "SeatsConfig":
        for role in ROLES:
            parse_seat(role, getattr(self, role), training=True)
        if not self.trained_roles:
            raise ValueError("at least one seat must be 'policy' (the weights being trained)")
        for role, members in self.pools.items():
            other = other_role(role)
            if other not in self.trained_roles:
                raise ValueError(f"seats.pools.{role} plays against the trained {other}, but seats.{other} is "
                                 f"not policy")
            check_pool(role, members, self.snapshots)
        return self

    @property
    def pool_seats(self) -> tuple[str, ...]:
        """Every seat spec a pool may draw, snapshots aside (the ``model:`` ones are loaded as frozen opponents)."""
        return tuple(dict.fromkeys(m.seat.strip() for members in self.pools.values() for m in members
                                   if m.seat.strip() != SNAPSHOT))

    @property
    def trained_roles(self) -> tuple[str, ...]:
        """Roles whose seat is the trained policy, in ``ROLES`` order."""
        return tuple(r for r in ROLES if getattr(self, r) == POLICY)


class RolloutConfig(BaseModel):
    """How episodes are played: in the driver process or on a pool of Ray actors."""

    model_config = STRICT_NUMBERS_AS_STR
    backend: Literal["inprocess", "ray"] = Field(default="ray", description=(
        "Where episodes are played: inprocess (the driver, one policy copy) or ray (a pool of actor workers)."))
    num_workers: int = Field(default=2, ge=1, description=(
        "Ray rollout workers (actors), each with its own policy copy; a step's jobs are split between them. "
        "Ignored in-process."))
    torch_threads_per_worker: int = Field(default=1, ge=1, description=(
        "Torch CPU threads of each Ray worker; each worker also reserves this many Ray CPUs."))
    sampling: SamplingConfig = Field(
        default_factory=lambda: SamplingConfig(temperature=1.0, max_new_tokens=ROLLOUT_MAX_NEW_TOKENS),
        description=("How policy seats sample in rollouts (do_sample must stay true; max_new_tokens is per turn "
                     "and may not exceed grpo.max_completion_length)."))
    max_rounds: int = Field(default=6, ge=1, description=(
        "Negotiation rounds per episode (one Scientist and one Lab Manager turn each) before it times out."))
    ray_address: Optional[str] = Field(default=None, description=(
        "Ray cluster to join: None starts a local Ray; 'auto' or host:port joins a running cluster."))
    max_worker_restarts: int = Field(default=3, ge=0, description=(
        "Dead Ray workers replaced (and their shard re-run) within one collect before the step fails."))
    engine: Literal["hf", "vllm"] = Field(default="hf", description=(
        "What generates the policy's turns: hf (transformers generate on left-padded batches) or vllm (a vLLM "
        "engine in each Ray rollout worker: paged KV cache, prefix caching across a seat's turns, continuous "
        "batching; needs rollout.backend=ray and a vLLM environment, rollout.vllm.python)."))
    vllm: VLLMConfig = Field(default_factory=VLLMConfig, description="The vLLM engine (rollout.engine=vllm).")
    ready_timeout_s: Optional[float] = Field(default=None, gt=0.0, description=(
        "Seconds a new Ray rollout worker may take to load its models before the run fails; None: "
        "training.rollout.ready.READY_BASE_S plus READY_S_PER_GIB for every GiB of the policy's weight files."))
    weight_sync: Literal["collective", "object_store"] = Field(default="collective", description=(
        "How the learner's weights reach the Ray workers each step: collective (the model's dtype, in buckets, "
        "over a torch.distributed group of the learner's main process and every worker: NCCL on GPUs, gloo "
        "otherwise) or object_store (float32 numpy arrays through Ray's object store, also the fallback)."))
    weight_sync_bucket_mib: int = Field(default=256, ge=1, description=(
        "Bucket size (MiB) of the collective weight sync: each side holds one bucket beside the weights."))
    max_staleness: int = Field(default=0, ge=0, le=1, description=(
        "How many steps the rollouts may run ahead of the learner: 0 plays every step's episodes with the weights "
        "it trains (on-policy); 1 plays step t+1's episodes with step t's weights while the learner trains on step "
        "t (needs rollout.backend=ray and grpo.num_iterations=1; pair it with grpo.rollout_correction_clip)."))
    weight_sync_timeout_s: float = Field(default=120.0, gt=0.0, description=(
        "Seconds the weight-sync group may take to form or to pass one bucket before the sync falls back "
        "to the object store."))

    @field_validator("sampling")
    @classmethod
    def _must_sample(cls, v: SamplingConfig) -> SamplingConfig:
        if not v.do_sample:
            raise ValueError("rollout.sampling.do_sample must be true: greedy groups give zero GRPO advantages")
        return v

    @model_validator(mode="after")
    def _engine_needs_ray(self) -> "RolloutConfig":
        if self.engine == "vllm" and self.backend != "ray":
            raise ValueError("rollout.engine=vllm runs in Ray rollout workers: set rollout.backend=ray")
        if self.max_staleness and self.backend != "ray":
            raise ValueError("rollout.max_staleness>0 plays ahead on Ray rollout workers: set rollout.backend=ray "
                             "(the in-process backend plays on-policy only)")
        return self


class GRPOParams(BaseModel):
    """GRPO hyper-parameters, passed on to TRL's ``GRPOConfig`` under the same names.

    One step plays ``groups_per_step`` groups of ``num_generations`` episodes (same seed, role and
    opponent per group).  ``max_completion_length`` bounds the tokens of one role's whole multi-turn
    trajectory.  ``warmup_ratio`` becomes TRL's ``warmup_steps`` (transformers 5 reads a float in
    [0, 1) there as a ratio and has no ``warmup_ratio``).  ``importance_sampling_level="sequence"`` is
    GSPO; TRL expects it with ``loss_type="luspo"``.
    """

    model_config = STRICT_NUMBERS_AS_STR
    num_generations: int = Field(default=8, ge=2, description=(
        "Episodes per GRPO group (same seed, role and opponent); advantages are computed within a group."))
    group_by: GroupBy = Field(default="episode", description=(
        "What a group shares: episode (its seed: num_generations whole episodes) or turn (one decision state: a "
        "trunk episode is played, and num_generations replies sampled at one of its turns, each played to the "
        "end; training.rollout.branch)."))
    branch: BranchConfig = Field(default_factory=BranchConfig, description=(
        "Where turn-level groups branch and which tokens train (grpo.group_by=turn)."))
    groups_per_step: int = Field(default=4, ge=1, description=(
        "GRPO groups per optimizer step; a step plays groups_per_step * num_generations episodes."))
    learning_rate: float = Field(default=2e-4, gt=0.0, description="Peak AdamW learning rate.")
    max_steps: int = Field(default=100, ge=1, description=(
        "Optimizer steps of the run; it consumes max_steps * groups_per_step distinct training seeds."))
    beta: float = Field(default=0.0, ge=0.0, description=(
        "KL penalty coefficient against the reference (initial) model; 0 loads no reference model."))
    loss_type: LOSS_TYPES = Field(default="dapo", description=(
        "TRL's GRPO loss variant (how token losses are normalised and clipped), e.g. grpo, dr_grpo, dapo, luspo."))
    epsilon: float = Field(default=0.2, gt=0.0, description=(
        "PPO-style clipping range of the importance ratio (lower side, and upper side unless epsilon_high)."))
    epsilon_high: Optional[float] = Field(default=None, gt=0.0, description=(
        "Upper clipping range of the importance ratio (DAPO's clip-higher); None: same as epsilon."))
    num_iterations: int = Field(default=1, ge=1, description=(
        "Optimisation passes over each step's rollouts (GRPO's mu); above 1 the ratio departs from 1 and "
        "clipping acts."))
    scale_rewards: SCALE_REWARDS = Field(default="group", description=(
        "Divide advantages by the reward std of the group, of the whole batch, or not at all (none); "
        "true/false mean group/none."))
    importance_sampling_level: Literal["token", "sequence"] = Field(default="token", description=(
        "Importance ratio per token, or one per sequence (GSPO; TRL expects it with loss_type=luspo)."))
    max_grad_norm: float = Field(default=1.0, gt=0.0, description="Gradient clipping: maximum global L2 norm.")
    warmup_ratio: float = Field(default=0.0, ge=0.0, lt=1.0, description=(
        "Share of max_steps spent warming the learning rate up from 0 (passed to TRL as warmup_steps < 1)."))
    lr_scheduler_type: LR_SCHEDULERS = Field(default="constant", description=(
        "Learning-rate schedule after warm-up: linear, cosine (decay to 0 at max_steps), constant, "
        "constant_with_warmup."))
    weight_decay: float = Field(default=0.0, ge=0.0, description="AdamW decoupled weight decay.")
    max_completion_length: int = Field(default=1024, ge=16, description=(
        "Tokens of one role's whole multi-turn trajectory (all its turns plus the masked opponent tokens) "
        "the trainer scores."))
    gradient_accumulation_steps: int = Field(default=1, ge=1, description=(
        "Micro-batches per optimizer step: the step's episodes are split into this many forward/backward "
        "passes (must divide groups_per_step * num_generations)."))
    gradient_checkpointing: bool = Field(default=False, description=(
        "Recompute activations in the backward pass: less memory, more time (TRL's default is on; it only "
        "pays on large models)."))
    advantage: Literal["group", "role_baseline"] = Field(default="group", description=(
        "Each episode's advantage: group (its reward minus its GRPO group's mean, scaled as scale_rewards says) "
        "or role_baseline (its reward minus a running mean of its role's rewards, SPIRAL's role-conditioned "
        "advantage; not scaled)."))
    role_baseline_decay: float = Field(default=0.9, ge=0.0, lt=1.0, description=(
        "With advantage=role_baseline: how much of a role's baseline each generation batch keeps (the rest "
        "moves to the role's mean reward in the batch)."))
    rollout_correction_clip: Optional[float] = Field(default=2.0, ge=1.0, description=(
        "Truncated importance-sampling correction of the rollout engine's gap: each episode's advantage is "
        "multiplied by min(clip, exp(sum over its model tokens of trainer minus rollout log-prob)); about 1 "
        "when the engine samples exactly what the trainer scores. None turns it off."))
    rescore_batch_size: Optional[int] = Field(default=None, ge=1, description=(
        "Sequences per forward pass when the learner re-scores a generation batch's log-probs (old and reference "
        "log-probs, the mismatch metric); None: the per-process micro-batch (per_device_train_batch_size)."))

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

    model_config = STRICT_NUMBERS_AS_STR
    templates: list[str] = Field(default_factory=lambda: list(TEMPLATES), description=(
        "Scenario templates training draws from (cell_biology, ml_benchmark, behavioral_psychology)."))
    difficulties: list[str] = Field(default_factory=lambda: list(DIFFICULTIES), description=(
        "Difficulties training draws from (easy, medium, hard)."))
    seed_offset: int = Field(default=0, ge=0, lt=len(TRAIN_SEEDS), description=(
        f"Training seeds skipped at the start of TRAIN_SEEDS (e.g. to keep seeds used by the warm start out); "
        f"0 <= seed_offset < {len(TRAIN_SEEDS)}."))
    difficulty_weights: dict[str, float] = Field(
        default_factory=dict,
        description=(
            "Relative share of GRPO groups per difficulty (an unlisted difficulty weighs 1.0; {} = every cell "
            "equally often). The Scientist's skills pay on medium and hard cells (on easy ones the paper's protocol "
            "is accepted at once), so e.g. {easy: 0.5} spends 1 of every 5 groups on easy cells. Cells follow a "
            "smooth weighted round-robin: deterministic and evenly spread."),
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

    model_config = STRICT_NUMBERS_AS_STR
    mode: Literal["offline", "online", "disabled"] = Field(default="offline", description=(
        "W&B mode: offline (local files, no key; sync later), online (needs a login), disabled (no wandb "
        "import; metrics.jsonl is written anyway)."))
    project: str = Field(default="replicalab", description="W&B project name.")
    entity: Optional[str] = Field(default=None, description="W&B user or team; None: the login's default entity.")
    group: Optional[str] = Field(default=None, description=(
        "W&B run group (a sweep sets it to the sweep's name); None: ungrouped."))
    tags: list[str] = Field(default_factory=list, description="W&B run tags.")
    transcripts_per_step: int = Field(default=4, ge=0, description=(
        "Episode transcripts per logged step in the W&B episodes table (spread over the step's episodes); "
        "0: none.  episodes.jsonl always holds every episode."))


class CheckpointConfig(BaseModel):
    """Checkpoint every ``save_steps`` optimizer steps, keeping the newest ``save_total_limit``."""
    model_config = STRICT_NUMBERS_AS_STR
    save_steps: int = Field(default=10, ge=1, description=(
        "Optimizer steps between checkpoints (checkpoint-N under the run's checkpoints/)."))
    save_total_limit: int = Field(default=3, ge=1, description=(
        "Newest checkpoints kept; older ones are deleted."))


class ValidationConfig(BaseModel):
    """Periodic evaluation on ``VALIDATION_SEEDS`` during training (``every_steps=0`` turns it off); its
    ``val/*`` metrics are what sweeps and selection read.  Test seeds are never played in training."""

    model_config = STRICT_NUMBERS_AS_STR
    every_steps: int = Field(default=0, ge=0, description=(
        "Optimizer steps between validation checks of the current weights in every trained seat (logged as "
        "val/*, the Scientist's against the run's Lab Manager seat, and val/<role>/...); 0: off."))
    episodes: int = Field(default=27, ge=1, le=len(VALIDATION_SEEDS), description=(
        f"Validation episodes per check, trained seat and opponent, spread over the data cells from the start of "
        f"VALIDATION_SEEDS (the same ones each time); 1..{len(VALIDATION_SEEDS)}."))
    opponents: dict[Literal["scientist", "lab_manager"], list[str]] = Field(
        default_factory=lambda: {"scientist": [SCRIPTED], "lab_manager": ["scripted:naive",
                                                                          "scripted:reader+defender+asker"]},
        description=(
            "The fixed opponents each trained seat is validated against, by the seat's role: opponents.scientist "
            "are Lab Manager seats, opponents.lab_manager Scientist seats (scripted or model:DIR). Logged per "
            "seat and opponent: val/<role>/reward (the seat's own reward), val/<role>/agreement_rate, "
            "val/<role>/parse_failure_rate, val/<role>/vs/<opponent>/reward."))

    @model_validator(mode="after")
    def _check_opponents(self) -> "ValidationConfig":
        for role, seats in self.opponents.items():
            if not seats:
                raise ValueError(f"validation.opponents.{role} is empty: name at least one opponent")
            other = other_role(role)
            for seat in seats:
                parse_seat(other, seat, training=True)
                if seat == POLICY:
                    raise ValueError("validation opponents are fixed: policy is the weights being trained")
        return self


class LoraConfig(BaseModel):
    """LoRA adapters through PEFT: only the adapters train and travel to rollout workers each step;
    ``final/`` holds the merged full model (and the adapter under ``final/adapter``)."""

    model_config = STRICT_NUMBERS_AS_STR
    enabled: bool = Field(default=False, description="Train LoRA adapters instead of the full weights.")
    r: int = Field(default=8, ge=1, description="Adapter rank.")
    alpha: float = Field(default=16.0, gt=0.0, description="LoRA scaling numerator (the update is scaled by alpha / r).")
    dropout: float = Field(default=0.0, ge=0.0, lt=1.0, description=(
        "Dropout on the adapter input during training (off while scoring rollouts)."))
    target_modules: list[str] = Field(default_factory=lambda: ["all-linear"], description=(
        "Module names (or suffixes) that get adapters; all-linear: every linear layer but the output head."))


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


