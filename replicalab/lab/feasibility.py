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
from itertools import repeat

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
        reasons = self.reasons
        return tuple([d for d in DIMENSIONS if reasons[d]])

    def flag_reasons(self) -> dict[str, tuple[str, ...]]:
        """The reasons behind each of the five flags of a LabManagerAction (empty: the flag is true);
        safety folds into ``equipment_ok``."""
        reasons = self.reasons
        return {
            "budget_ok": reasons["budget"],
            "equipment_ok": reasons["equipment"] + reasons["safety"],
            "reagents_ok": reasons["reagents"],
            "schedule_ok": reasons["schedule"],
            "staff_ok": reasons["staff"],
        }

    def flags(self) -> dict[str, bool]:
        """The five flags of a LabManagerAction (``flag_reasons``: a flag is true when it has no reasons)."""
        return {flag: not why for flag, why in self.flag_reasons().items()}


def plan_cost(
    fees: dict[str, float], costs: dict[str, float], ccosts: dict[str, float],
    equipment: list[str], reagents: list[str], controls: list[str], sample_size: int, duration_days: int,
) -> float:
    """Cost of a plan given prices and canonical ids; unknown items cost nothing (they fail elsewhere)."""
    # Each sum is over a set of distinct ids (0 for none, as ``sum`` of nothing).
    total = (sum(map(fees.get, set(equipment), repeat(0.0))) if equipment else 0) * duration_days
    total += (sum(map(costs.get, set(reagents), repeat(0.0))) if reagents else 0) * sample_size
    total += sum(map(ccosts.get, set(controls), repeat(0.0))) if controls else 0
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
    listed = {*equipment, *reagents}
    return [slot for slot in technique.equipment_slots + technique.reagent_slots if listed.isdisjoint(slot)]


def check_feasibility(protocol: Protocol, scenario: Scenario) -> FeasibilityReport:
    """Check ``protocol`` against the lab of ``scenario``; pure and deterministic."""
    lab = scenario.lab
    tech_id = canonical_id(protocol.technique)
    technique = scenario.techniques.get(tech_id)
    equipment = list(map(canonical_id, protocol.required_equipment))
    reagents = list(map(canonical_id, protocol.required_reagents))
    controls = list(map(canonical_id, protocol.controls))
    n, days = protocol.sample_size, protocol.duration_days

    equipment_reasons, unknown_eq = _item_problems(
        equipment, lab.equipment_available, lab.equipment_booked, UNUSABLE_REASONS[0], scenario, "equipment"
    )
    reagent_reasons, unknown_re = _item_problems(
        reagents, lab.reagents_in_stock, lab.reagents_out_of_stock, UNUSABLE_REASONS[1], scenario, "a reagent"
    )
    schedule: list[str] = []
    missing: list[tuple[str, ...]] = []
    if technique is None:
        equipment_reasons.append(f"{tech_id or 'the technique'} is not a technique the lab knows")
    else:
        missing = _missing_slots(technique, equipment, reagents)
        for slot in missing:
            dim_reasons = equipment_reasons if slot in technique.equipment_slots else reagent_reasons
            dim_reasons.append(f"{tech_id} needs one of {', '.join(slot)}, none listed")
        if days < technique.min_days:
            schedule.append(f"{tech_id} needs more than {days} days")
    if days > lab.time_limit_days:
        schedule.append(f"{days} days exceeds the time limit of {lab.time_limit_days} days")

    cost = plan_cost(
        scenario.equipment_fees, scenario.reagent_costs, scenario.control_costs, equipment, reagents, controls, n, days
    )
    budget = ("over the lab's budget",) if cost > lab.budget_total else ()

    hours_needed = round(n * technique.hours_per_sample, 2) if technique is not None else 0.0
    hours_available = lab.staff_count * days * HOURS_PER_STAFF_DAY
    staff = (f"more work than {lab.staff_count} staff can do in {days} days",) if hours_needed > hours_available else ()

    banned = lab.banned
    safety = tuple(f"{name} is forbidden by the lab's safety rules"
                   for name in (tech_id, *equipment, *reagents) if name in banned) if banned else ()

    return FeasibilityReport(
        reasons={"budget": budget, "equipment": tuple(equipment_reasons), "reagents": tuple(reagent_reasons),
                 "schedule": tuple(schedule), "staff": staff, "safety": safety},  # DIMENSIONS order
        cost=cost,
        staff_hours_needed=hours_needed,
        staff_hours_available=hours_available,
        unknown_items=tuple(unknown_eq + unknown_re),
        missing_slots=tuple(missing),
    )


def plan_key(protocol: Protocol) -> tuple:
    """The fields of ``protocol`` that ``check_feasibility`` reads (everything but the rationale)."""
    return (protocol.technique, protocol.sample_size, protocol.duration_days, tuple(protocol.controls),
            tuple(protocol.required_equipment), tuple(protocol.required_reagents))


class Feasibility:
    """``check_feasibility`` against one scenario's lab, each distinct plan checked once.

    Within an episode the environment, the scripted Lab Manager and the judge look at the same few plans;
    sharing one ``Feasibility`` (the environment's, ``ReplicaLabEnv.feasibility``) checks each of them
    once.  It remembers only the plans of its own scenario, so it lives as long as the episode does.
    """

    __slots__ = ("scenario", "_reports")

    def __init__(self, scenario: Scenario):
        self.scenario = scenario
        self._reports: dict[tuple, FeasibilityReport] = {}

    def __call__(self, protocol: Protocol) -> FeasibilityReport:
        key = plan_key(protocol)
        report = self._reports.get(key)
        if report is None:
            report = self._reports[key] = check_feasibility(protocol, self.scenario)
        return report
