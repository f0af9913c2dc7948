"""``data``: which scenarios a training run draws, and in which order (torch-free)."""

from __future__ import annotations

from typing import Any, Sequence

from pydantic import BaseModel, Field, field_validator, model_validator

from replicalab import DIFFICULTIES, TEMPLATES, TRAIN_SEEDS
from replicalab.scenarios import cells
from replicalab.seats import ROLES
from training.config.loading import STRICT_NUMBERS_AS_STR


#: Each weights field of ``DataConfig``: the keys it may name, and whether a weight may be 0.
_WEIGHT_KEYS: dict[str, tuple[tuple[str, ...], bool]] = {"difficulty_weights": (DIFFICULTIES, True),
                                                         "role_weights": (ROLES, False)}


def smooth_round_robin(weights: Sequence[float], n: int) -> list[int]:
    """``n`` picks of ``range(len(weights))``, each index's share proportional to its weight, evenly spread and
    deterministic (ties to the lower index); equal weights give ``0, 1, ..., len - 1`` in turn."""
    total = sum(weights)
    credit = [0.0] * len(weights)
    out = []
    for _ in range(n):
        credit = [c + w for c, w in zip(credit, weights)]
        best = max(range(len(weights)), key=lambda k: (credit[k], -k))
        credit[best] -= total
        out.append(best)
    return out


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

    role_weights: dict[str, float] = Field(
        default_factory=dict,
        description=(
            "Relative share of GRPO groups per trained role when both seats train (an unlisted role weighs 1.0; "
            "{} = the roles in turn). E.g. {scientist: 3} gives the Scientist 3 of every 4 groups; each role still "
            "meets every cell in turn. A weight must be positive; single-seat runs ignore it."),
    )

    @field_validator("difficulty_weights", "role_weights")
    @classmethod
    def _weights(cls, v: dict[str, float], info: Any) -> dict[str, float]:
        valid, zero_ok = _WEIGHT_KEYS[info.field_name]
        unknown = [k for k in v if k not in valid]
        if unknown:
            raise ValueError(f"{info.field_name} names unknown keys {unknown}; valid: {', '.join(valid)}")
        bad = {k: w for k, w in v.items() if not (w >= 0 if zero_ok else w > 0)}
        if bad:
            raise ValueError(f"{info.field_name} must be {'non-negative' if zero_ok else 'positive'}, got {bad}")
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
        return [cells_[k] for k in smooth_round_robin([self.difficulty_weights.get(d, 1.0) for _, d in cells_], n)]

    def role_schedule(self, roles: Sequence[str], n: int) -> list[str]:
        """The trained role of each of ``n`` consecutive groups: ``roles`` in turn, or, with ``role_weights``, a
        smooth weighted round-robin (ties broken in ``roles`` order)."""
        return [roles[k] for k in smooth_round_robin([self.role_weights.get(r, 1.0) for r in roles], n)]

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
