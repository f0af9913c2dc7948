"""Opponent pools (``seats.pools``) and snapshots of the policy (``seats.snapshots``); torch-free.

``seats.pools.ROLE`` lists who plays ROLE in the episodes the *other* seat trains on, each with a weight: the
live policy (``policy``), frozen snapshots of it (``snapshot``), scripted agents (``scripted:NAME``) and fixed
checkpoints (``model:DIR``).  Each GRPO group draws one member (the group's G episodes share their opponent,
so its advantages compare like with like); ``snapshot`` then picks one of the snapshots held, uniformly.
``seats.snapshots`` says how often a frozen copy of the policy is taken and how many are kept.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from replicalab.seats import POLICY, parse_seat
from training.config.loading import STRICT_NUMBERS_AS_STR

#: The pool member standing for the policy's frozen snapshots.
SNAPSHOT = "snapshot"


class PoolMember(BaseModel):
    """One member of an opponent pool and its weight (weights are relative: a pool's need not sum to 1)."""

    model_config = STRICT_NUMBERS_AS_STR
    seat: str = Field(description=(
        "policy (the live weights), snapshot (a frozen snapshot of the policy, seats.snapshots), scripted, "
        "scripted:NAME or model:DIR (a fixed checkpoint)."))
    weight: float = Field(gt=0.0, description="Relative chance of drawing this member for a GRPO group.")


class SnapshotConfig(BaseModel):
    """Frozen copies of the policy for opponent pools."""

    model_config = STRICT_NUMBERS_AS_STR
    every: int = Field(default=0, ge=0, description=(
        "Take a snapshot of the policy every this many steps, starting at step 0 (the weights the run starts "
        "from); 0: never (a pool may then not name snapshot)."))
    keep: int = Field(default=2, ge=1, description=(
        "Snapshots held: the newest ones (each costs one model copy in every rollout worker and one in "
        "host memory on the driver)."))


def check_pool(role: str, members: list[PoolMember], snapshots: SnapshotConfig) -> None:
    """Raise ValueError (one line) unless ``members`` is a valid pool for ``role``."""
    if not members:
        raise ValueError(f"seats.pools.{role} is empty: list at least one member, or leave the role out")
    seats = [m.seat.strip() for m in members]
    if len(set(seats)) != len(seats):
        raise ValueError(f"seats.pools.{role} names a member twice")
    for seat in seats:
        if seat == SNAPSHOT:
            if not snapshots.every:
                raise ValueError(f"seats.pools.{role} draws snapshots, but seats.snapshots.every is 0")
        elif seat != POLICY:
            parse_seat(role, seat, training=True)
