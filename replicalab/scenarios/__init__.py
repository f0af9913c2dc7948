"""Scenario generation: ``generate_scenario(seed, template, difficulty) -> Scenario``."""

from __future__ import annotations

from typing import Sequence

from replicalab.scenario_records import Domain, Scenario, canonical_id
from replicalab.scenarios import behavioral_psychology, cell_biology, ml_benchmark
from replicalab.scenarios.build import build_scenario

DOMAINS: dict[str, Domain] = {
    m.DOMAIN.name: m.DOMAIN for m in (cell_biology, ml_benchmark, behavioral_psychology)
}
TEMPLATES: tuple[str, ...] = tuple(DOMAINS)
DIFFICULTIES: tuple[str, ...] = ("easy", "medium", "hard")


def cells(templates: Sequence[str] = TEMPLATES,
          difficulties: Sequence[str] = DIFFICULTIES) -> list[tuple[str, str]]:
    """Every (template, difficulty) pair, templates outermost: the grid every report and data set uses."""
    return [(t, d) for t in templates for d in difficulties]


def validate_choice(template: str, difficulty: str, seed: int) -> None:
    """Raise ValueError naming the valid choices for a bad template, difficulty or seed."""
    if template not in DOMAINS:
        raise ValueError(f"unknown template {template!r}; valid templates: {', '.join(TEMPLATES)}")
    if difficulty not in DIFFICULTIES:
        raise ValueError(f"unknown difficulty {difficulty!r}; valid difficulties: {', '.join(DIFFICULTIES)}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an integer, got {seed!r}")
    if seed < 0:
        raise ValueError(f"seed must be non-negative, got {seed}")


def generate_scenario(seed: int, template: str, difficulty: str) -> Scenario:
    """The scenario of ``(seed, template, difficulty)``: same inputs, same scenario, in any process."""
    validate_choice(template, difficulty, seed)
    return build_scenario(DOMAINS[template], seed, difficulty)


__all__ = ["DIFFICULTIES", "TEMPLATES", "Scenario", "canonical_id", "cells", "generate_scenario", "validate_choice"]
