"""``validation``: the periodic check of a training run's weights on ``VALIDATION_SEEDS`` (torch-free)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

from replicalab import VALIDATION_SEEDS
from replicalab.seats import POLICY, SCRIPTED, other_role, parse_seat
from training.config.loading import STRICT_NUMBERS_AS_STR


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
