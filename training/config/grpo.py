"""``grpo``: the GRPO hyper-parameters of a training run, passed on to TRL's ``GRPOConfig`` (torch-free)."""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, Field, field_validator, model_validator

from training.config.branch import BranchConfig, GroupBy
from training.config.loading import STRICT_NUMBERS_AS_STR

#: Loss types TRL 1.16's GRPOConfig accepts (trl/trainer/grpo_config.py, grpo_trainer.py).
LOSS_TYPES = Literal["grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo"]
#: Reward scaling: TRL 1.16's three (``True`` means "group", ``False`` means "none", as in TRL) and ``role``.
SCALE_REWARDS = Literal["group", "batch", "role", "none"]
#: ``scale_rewards`` value scaled by this project's learner (``training.trainer.grpo_maths.role_scaled``), not TRL's.
ROLE_SCALE = "role"
LR_SCHEDULERS = Literal["linear", "cosine", "constant", "constant_with_warmup"]


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
        "Divide advantages by the reward std of the group, of the whole batch, by the root mean square of the "
        "step's advantages of their role (role: a group's weight stays proportional to how much its replies "
        "differ, and each seat's advantages have unit scale), or not at all (none); true/false mean group/none."))
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
