"""``data``: which scenarios a training run draws, and in which order (torch-free)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, field_validator, model_validator

from replicalab import DIFFICULTIES, TEMPLATES, TRAIN_SEEDS
from replicalab.scenarios import cells
from training.config.loading import STRICT_NUMBERS_AS_STR


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
