"""``check_feasibility``: the single source of lab truth.

A protocol is checked against the scenario's lab on six dimensions -- budget, equipment, reagents,
schedule, staff and safety -- each with the reasons it fails, in plain words.  The reasons cite only
facts the Lab Manager's observation shows (the lab's limits, the plan's items and days), never the
hidden prices or staff rates behind a verdict, so a policy in that seat can state them too; the
figures themselves are on the report (``cost``, ``staff_hours_needed``, ``staff_hours_available``).

Cost model (all prices are the scenario's, hidden from the Scientist):
    cost = sum(equipment fee per day * duration_days) + sum(reagent cost per sample * sample_size)
           + sum(flat cost of each control)
Staff model: the technique needs ``hours_per_sample * sample_size`` staff hours; the lab offers
``staff_count * duration_days * HOURS_PER_STAFF_DAY``.
"""

from __future__ import annotations

from dataclasses import dataclass

from replicalab.models import Protocol
from replicalab.scenario_records import Scenario, Technique, canonical_id

HOURS_PER_STAFF_DAY = 6.0
DIMENSIONS = ("budget", "equipment", "reagents", "schedule", "staff", "safety")
#: How a reason names a listed item the lab knows but cannot use (booked, out of stock, not in the lab).
UNUSABLE_REASONS = ("{item} is booked during the window", "{item} is out of stock", "the lab has no {item}")


@dataclass(frozen=True, slots=True)
class FeasibilityReport:
    """Per-dimension verdicts; ``reasons[dim]`` is empty when the dimension passes."""

    reasons: dict[str, tuple[str, ...]]
    cost: float
    staff_hours_needed: float
    staff_hours_available: float
    unknown_items: tuple[str, ...]  # listed equipment / reagents the lab's catalog does not know
    missing_slots: tuple[tuple[str, ...], ...]  # slots of the technique with no listed option

    def passes(self, dim: str) -> bool:
        return not self.reasons[dim]

    @property
    def ok(self) -> bool:
        return not any(self.reasons.values())

    @property
    def failed(self) -> tuple[str, ...]:
        return tuple(d for d in DIMENSIONS if self.reasons[d])

    def flags(self) -> dict[str, bool]:
        """The five flags of a LabManagerAction; safety folds into ``equipment_ok``."""
        return {
            "budget_ok": self.passes("budget"),
            "equipment_ok": self.passes("equipment") and self.passes("safety"),
            "reagents_ok": self.passes("reagents"),
            "schedule_ok": self.passes("schedule"),
            "staff_ok": self.passes("staff"),
        }


def plan_cost(
    fees: dict[str, float], costs: dict[str, float], ccosts: dict[str, float],
    equipment: list[str], reagents: list[str], controls: list[str], sample_size: int, duration_days: int,
) -> float:
    """Cost of a plan given prices and canonical ids; unknown items cost nothing (they fail elsewhere)."""
    total = sum(fees.get(e, 0.0) for e in set(equipment)) * duration_days
    total += sum(costs.get(r, 0.0) for r in set(reagents)) * sample_size
    total += sum(ccosts.get(c, 0.0) for c in set(controls))
    return round(total, 2)


def protocol_cost(protocol: Protocol, scenario: Scenario) -> float:
    return plan_cost(
        scenario.equipment_fees, scenario.reagent_costs, scenario.control_costs,
        [canonical_id(e) for e in protocol.required_equipment],
        [canonical_id(r) for r in protocol.required_reagents],
        [canonical_id(c) for c in protocol.controls],
        protocol.sample_size,
        protocol.duration_days,
    )


def _item_problems(
    items: list[str], free: tuple[str, ...], blocked: tuple[str, ...], blocked_reason: str,
    scenario: Scenario, kind: str,
) -> tuple[list[str], list[str]]:
    reasons, unknown = [], []
    known = scenario.equipment_fees if kind == "equipment" else scenario.reagent_costs
    for item in items:
        if item not in known:
            unknown.append(item)
            reasons.append(f"{item} is not {kind} the lab knows")
        elif item in blocked:
            reasons.append(blocked_reason.format(item=item))
        elif item not in free:
            reasons.append(UNUSABLE_REASONS[2].format(item=item))
    return reasons, unknown


def _missing_slots(technique: Technique, equipment: list[str], reagents: list[str]) -> list[tuple[str, ...]]:
    listed = set(equipment) | set(reagents)
    slots = technique.equipment_slots + technique.reagent_slots
    return [slot for slot in slots if not listed.intersection(slot)]


def check_feasibility(protocol: Protocol, scenario: Scenario) -> FeasibilityReport:
    """Check ``protocol`` against the lab of ``scenario``; pure and deterministic."""
    lab = scenario.lab
    tech_id = canonical_id(protocol.technique)
    technique = scenario.techniques.get(tech_id)
    equipment = [canonical_id(e) for e in protocol.required_equipment]
    reagents = [canonical_id(r) for r in protocol.required_reagents]
    controls = [canonical_id(c) for c in protocol.controls]
    n, days = protocol.sample_size, protocol.duration_days
    reasons: dict[str, list[str]] = {d: [] for d in DIMENSIONS}

    eq_reasons, unknown_eq = _item_problems(
        equipment, lab.equipment_available, lab.equipment_booked, UNUSABLE_REASONS[0], scenario, "equipment"
    )
    re_reasons, unknown_re = _item_problems(
        reagents, lab.reagents_in_stock, lab.reagents_out_of_stock, UNUSABLE_REASONS[1], scenario, "a reagent"
    )
    reasons["equipment"] += eq_reasons
    reasons["reagents"] += re_reasons
    missing: list[tuple[str, ...]] = []
    if technique is None:
        reasons["equipment"].append(f"{tech_id or 'the technique'} is not a technique the lab knows")
    else:
        missing = _missing_slots(technique, equipment, reagents)
        for slot in missing:
            dim = "equipment" if slot in technique.equipment_slots else "reagents"
            reasons[dim].append(f"{tech_id} needs one of {', '.join(slot)}, none listed")
        if days < technique.min_days:
            reasons["schedule"].append(f"{tech_id} needs more than {days} days")
    if days > lab.time_limit_days:
        reasons["schedule"].append(f"{days} days exceeds the time limit of {lab.time_limit_days} days")

    cost = plan_cost(
        scenario.equipment_fees, scenario.reagent_costs, scenario.control_costs, equipment, reagents, controls, n, days
    )
    if cost > lab.budget_total:
        reasons["budget"].append("over the lab's budget")

    hours_needed = round(n * technique.hours_per_sample, 2) if technique is not None else 0.0
    hours_available = lab.staff_count * days * HOURS_PER_STAFF_DAY
    if hours_needed > hours_available:
        reasons["staff"].append(f"more work than {lab.staff_count} staff can do in {days} days")

    for name in (tech_id, *equipment, *reagents):
        if name in lab.banned:
            reasons["safety"].append(f"{name} is forbidden by the lab's safety rules")

    return FeasibilityReport(
        reasons={d: tuple(r) for d, r in reasons.items()},
        cost=cost,
        staff_hours_needed=hours_needed,
        staff_hours_available=hours_available,
        unknown_items=tuple(unknown_eq + unknown_re),
        missing_slots=tuple(missing),
    )
