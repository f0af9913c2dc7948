"""``grpo.branch``: how a step's groups branch from one decision state (``grpo.group_by: turn``; torch-free)."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, Field, NonNegativeFloat

from training.config.loading import STRICT_NUMBERS_AS_STR

#: What a GRPO group shares: the seed (whole episodes) or a replayed decision state (``training.rollout.branch``).
GroupBy = Literal["episode", "turn"]
#: The kinds of chance a group can branch at: the Scientist's skills (``replicalab.agents.skilled.SKILLS``), its
#: turn after a read, whatever the lab answered (``training.rollout.branch.AFTER_READ``), its turn right after the
#: lab accepted (``training.rollout.branch.CLOSE``) and the Lab Manager's repair chance
#: (``training.rollout.branch.REPAIR``).
ChanceKind = Literal["read", "defend", "ask", "after_read", "close", "repair"]


class BranchConfig(BaseModel):
    """Branch groups (``training.rollout.branch``): where a group branches and which of its tokens train."""

    model_config = STRICT_NUMBERS_AS_STR
    other_share: float = Field(default=0.25, ge=0.0, le=1.0, description=(
        "Probability that a group branches at a turn of the trained role that is no skill's chance even when the "
        "trunk has a chance (a trunk without one always branches at another turn, chosen uniformly)."))
    tokens: Literal["reply", "continuation"] = Field(default="reply", description=(
        "Which tokens of a branch train on its advantage: reply (the branched reply alone; the continuation is "
        "played for the reward) or continuation (the branched reply and the seat's later turns)."))
    temperature: Optional[float] = Field(default=None, gt=0.0, description=(
        "Temperature of the branched reply, the one reply of a branch that trains (needs tokens=reply); the "
        "trainer scores at it, and the replayed prefix and the continuation keep rollout.sampling's. None: "
        "rollout.sampling.temperature. Ignored with grpo.group_by=episode."))
    chance_weights: dict[ChanceKind, NonNegativeFloat] = Field(default_factory=dict, description=(
        "Weight of each kind of chance (read, defend, ask, after_read, close, repair) when a trunk holds several: its "
        "chance is drawn in proportion to it, so a step's groups hold more of the kinds weighed more. A kind not "
        "named weighs 1, except close (the Scientist's turn right after the lab accepted), a chance only where "
        "named; a kind weighing 0 is no branch point (neither a chance nor another turn) while the trunk has "
        "another."))
    without_chance: Literal["own_turn", "borrow"] = Field(default="own_turn", description=(
        "Where a group whose trunk holds no chance branches: at another of its own turns (own_turn), or at a "
        "chance of another trunk of its role in the same step, drawn uniformly, its jobs taking that trunk's seed, "
        "scenario and opponent (borrow; own_turn when no trunk of the step holds one)."))
