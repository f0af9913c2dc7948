"""``seats``: who plays each role of a training run, and the opponent pools (torch-free)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

from replicalab.seats import POLICY, ROLES, SCRIPTED, other_role, parse_seat
from training.config.loading import STRICT_NUMBERS_AS_STR
from training.config.pool import SNAPSHOT, PoolMember, SnapshotConfig, check_pool


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
