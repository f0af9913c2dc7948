"""Typed records of a generated scenario.

A ``Domain`` is the static knowledge of one template family (techniques, item catalog, controls,
text).  A ``Scenario`` is one seeded instance: the paper, the lab's private facts, the item prices and
the hidden reference the judge scores against.  Everything is frozen; dict fields are read-only by
convention.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from replicalab.models import Protocol

#: The paper method's two structured statements, in this order, each followed by a protocol as compact
#: JSON with the same fields (ScientistAction order): the protocol run with the orthogonal method the
#: authors cross-checked with, then the published protocol (last).
CROSS_CHECK_MARKER = "Cross-checked with:"
PUBLISHED_MARKER = "Published protocol:"
#: The key finding's last sentence: the smallest sample size a power analysis allows, in prose and then under the
#: key a protocol writes it with (compact JSON, as the method's protocols), so a seat that copies a number from its
#: brief can copy this one where a counter needs it.
POWER_STATEMENT = 'A power analysis for this effect calls for at least {n} {unit}: {{"sample_size":{n}}}.'
_POWER = re.compile(re.escape(POWER_STATEMENT.split("{n}")[0]) + r'(\d+) [^:]*: \{"sample_size":\d+\}\.')


def power_statement(text: str) -> tuple[str, int]:
    """The ``POWER_STATEMENT`` sentence in ``text`` and its minimum sample size; ``("", 0)`` when it states none."""
    found = _POWER.search(text)
    return (found.group(0), int(found.group(1))) if found else ("", 0)


@lru_cache(maxsize=1 << 14)
def canonical_id(name: str) -> str:
    """Canonical item / technique / control id: lower case, spaces and hyphens as underscores."""
    return name.strip().lower().replace(" ", "_").replace("-", "_")


@dataclass(frozen=True, slots=True)
class TechniqueSpec:
    """A technique of a domain: one item is needed from each slot (first option = the canonical one)."""

    id: str
    equipment_slots: tuple[tuple[str, ...], ...]
    reagent_slots: tuple[tuple[str, ...], ...]
    hours_per_sample: float
    min_days: int
    description: str
    hazard: str = ""  # safety category that can forbid the technique


@dataclass(frozen=True, slots=True)
class Domain:
    name: str
    techniques: tuple[TechniqueSpec, ...]
    controls: tuple[str, ...]
    subjects: tuple[str, ...]  # critical item pool (cell line, data set, participant pool)
    treatments: tuple[str, ...]  # critical item pool (compound, model, manipulation)
    equipment_fee_range: tuple[float, float]  # per day
    reagent_cost_range: tuple[float, float]  # per sample
    critical_cost_range: tuple[float, float]  # per sample, subjects and treatments
    control_cost_range: tuple[float, float]  # flat, per control
    sample_size_range: tuple[int, int]
    sample_unit: str
    hazards: dict[str, str]  # hazard category -> safety rule text
    title_templates: tuple[str, ...]
    hypothesis_template: str
    finding_template: str
    goal_template: str


@dataclass(frozen=True, slots=True)
class Technique:
    """A technique as instantiated for one scenario (seeded workload and minimum duration)."""

    id: str
    equipment_slots: tuple[tuple[str, ...], ...]
    reagent_slots: tuple[tuple[str, ...], ...]
    hours_per_sample: float
    min_days: int


@dataclass(frozen=True, slots=True)
class LabFacts:
    """What only the Lab Manager knows."""

    budget_total: float
    equipment_available: tuple[str, ...]
    equipment_booked: tuple[str, ...]
    reagents_in_stock: tuple[str, ...]
    reagents_out_of_stock: tuple[str, ...]
    staff_count: int
    time_limit_days: int
    safety_restrictions: tuple[str, ...]
    banned: frozenset[str]  # technique and item ids the safety rules forbid
    routine_techniques: tuple[str, ...]  # techniques the lab runs, in the order it prefers them


@dataclass(frozen=True, slots=True)
class ReferenceSpec:
    """The judge's hidden reference."""

    required_controls: tuple[str, ...]
    min_sample_size: int
    core_technique: str
    substitutes: dict[str, float]  # technique -> fidelity cost (core technique -> 0.0)
    option_costs: dict[str, float]  # item -> fidelity cost when it stands in for its slot's first option
    critical_items: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Scenario:
    seed: int
    template: str
    difficulty: str
    paper_title: str
    paper_hypothesis: str
    paper_method: str
    paper_key_finding: str
    experiment_goal: str
    paper_protocol: Protocol
    techniques: dict[str, Technique]
    equipment_fees: dict[str, float]  # per day
    reagent_costs: dict[str, float]  # per sample
    control_costs: dict[str, float]  # flat, per control
    lab: LabFacts
    reference: ReferenceSpec
    reference_protocol: Protocol

    def known_items(self) -> frozenset[str]:
        return frozenset(self.equipment_fees) | frozenset(self.reagent_costs)
