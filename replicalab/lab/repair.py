"""The Lab Manager's repair: the closest plan the lab can run, using lab knowledge only.

The lab knows which items can stand in for each other within a technique, which techniques it runs
(in the order it prefers them), prices, staff and the calendar.  It does not know the paper's hidden
reference, so it never touches controls and never adds an item the Scientist left out of its own
technique (but replaces the items of another technique a plan kept after changing its technique by its
own technique's).  It does not volunteer a stand-in for an item of the Scientist's plan it cannot use:
it names the item, and a Scientist learns the stand-in only by asking (``replicalab.lab.answers``).  So
a plan with an unusable item is moved to the lab's preferred runnable technique, and only when there is
none are the stand-ins swapped in (the lab never dead-ends).  It clamps the duration and trims the sample
size to fit budget and staff, shortening the schedule (down to the technique's minimum) before cutting the
sample size below SAMPLE_FLOOR_FRACTION of what was proposed.
"""

from __future__ import annotations

import math
from typing import Callable

from replicalab.lab.feasibility import HOURS_PER_STAFF_DAY, plan_cost
from replicalab.models import Protocol
from replicalab.scenario_records import Scenario, Technique, canonical_id
from replicalab.trusted import trusted

SAMPLE_FLOOR_FRACTION = 0.75  # keep at least this share of the proposed sample size, if shortening allows


def _usable(scenario: Scenario) -> set[str]:
    lab = scenario.lab
    return (set(lab.equipment_available) | set(lab.reagents_in_stock)) - lab.banned


def _slot_choices(technique: Technique, listed: list[str], usable: set[str]) -> dict[str, str] | None:
    """old item -> replacement for each listed slot item; None if some listed slot has no usable option."""
    swaps: dict[str, str] = {}
    for slot in technique.equipment_slots + technique.reagent_slots:
        present = next((i for i in listed if i in slot), None)  # the slot's first listed item
        if present is None or present in usable:
            continue
        free = next((o for o in slot if o in usable), None)
        if free is None:
            return None
        swaps[present] = free
    return swaps


def _runnable(technique: Technique, scenario: Scenario, usable: set[str]) -> bool:
    return (
        technique.id not in scenario.lab.banned
        and technique.min_days <= scenario.lab.time_limit_days
        and all(not usable.isdisjoint(s) for s in technique.equipment_slots + technique.reagent_slots)
    )


def _switches(old: Technique | None, scenario: Scenario, usable: set[str], eq: list[str], re: list[str]):
    """Every move of the plan to a runnable technique, in the lab's order of preference; slot items of
    the old technique are replaced by the new one's usable options."""
    old_items = {i for s in (old.equipment_slots + old.reagent_slots) for i in s} if old else set()
    for alt_id in scenario.lab.routine_techniques:
        alt = scenario.techniques[alt_id]
        if old is not None and alt_id == old.id or not _runnable(alt, scenario, usable):
            continue
        new_eq = [next(o for o in s if o in usable) for s in alt.equipment_slots]
        new_re = [next(o for o in s if o in usable) for s in alt.reagent_slots]
        new_eq += [i for i in eq if i not in old_items and i not in new_eq]
        new_re += [i for i in re if i not in old_items and i not in new_re]
        yield alt, new_eq, new_re


def _sized(protocol: Protocol, scenario: Scenario, technique: Technique, eq: list[str], re: list[str],
           usable: set[str]) -> Protocol | None:
    """``protocol`` on ``technique`` with these items (those in ``usable``), its duration clamped and its
    sample size trimmed to fit budget and staff; None when not even one sample fits."""
    lab = scenario.lab
    eq = list(dict.fromkeys(i for i in eq if i in usable))
    re = list(dict.fromkeys(i for i in re if i in usable))
    days = min(max(protocol.duration_days, technique.min_days), lab.time_limit_days)
    controls = [canonical_id(c) for c in protocol.controls]
    per_sample = plan_cost({}, scenario.reagent_costs, {}, [], re, [], 1, 0)

    def fits(d: int) -> int:
        """The largest sample size (up to the proposed one) that budget and staff allow over ``d`` days."""
        fixed = plan_cost(scenario.equipment_fees, scenario.reagent_costs, scenario.control_costs, eq, [], controls, 0, d)
        n = protocol.sample_size
        if per_sample > 0:
            n = min(n, math.floor((lab.budget_total - fixed) / per_sample))
        if technique.hours_per_sample > 0:
            n = min(n, math.floor(lab.staff_count * d * HOURS_PER_STAFF_DAY / technique.hours_per_sample))
        return n

    n = fits(days)
    floor = math.ceil(SAMPLE_FLOOR_FRACTION * protocol.sample_size)
    if n < floor:  # rather shorten the schedule than gut the sample size
        n, days = _shortened(fits, days, technique.min_days, floor)
    if n < 1:
        return None
    return trusted(  # the parts of a valid protocol and the lab's own ids: nothing to validate
        Protocol, sample_size=n, controls=list(protocol.controls), technique=technique.id, duration_days=days,
        required_equipment=eq, required_reagents=re, rationale=protocol.rationale,
    )


def _shortened(fits: Callable[[int], int], longest: int, shortest: int, floor: int) -> tuple[int, int]:
    """(sample size, days): the longest schedule from ``longest`` down to ``shortest`` days on which
    ``fits`` allows at least ``floor`` samples, else the schedule allowing the most (the longest among equals)."""
    options = []
    for d in range(longest, shortest - 1, -1):
        n = fits(d)
        if n >= floor:
            return n, d
        options.append((n, d))
    return max(options)


def _refit(technique: Technique, scenario: Scenario, usable: set[str], eq: list[str], re: list[str]):
    """The plan's items fitted to its own technique when it lists items only other techniques use (a
    plan moved to another technique that kept the old one's items): those are replaced by the usable
    options of the technique's slots that no listed item fills.  A plan without such items is returned
    unchanged (the lab never adds to a plan that left its own items out)."""
    own = {i for s in technique.equipment_slots + technique.reagent_slots for i in s}
    other = {i for t in scenario.techniques.values() for s in t.equipment_slots + t.reagent_slots for i in s} - own
    if not other.intersection(eq + re):
        return eq, re

    def fill(slots: tuple[tuple[str, ...], ...], listed: list[str]) -> list[str]:
        chosen = [next((i for i in listed if i in s), None) or next((o for o in s if o in usable), s[0]) for s in slots]
        return chosen + [i for i in listed if i not in other and i not in chosen]

    return fill(technique.equipment_slots, eq), fill(technique.reagent_slots, re)


def repair_plan(protocol: Protocol, scenario: Scenario) -> Protocol | None:
    """The lab's alternative to ``protocol``, or None when the lab cannot offer one.

    In order: the plan's own technique, sized, when the lab can run it with the plan's items; else the
    first technique in the lab's order of preference on which one sample fits (so a preferred technique
    too costly for this budget does not leave the lab without an alternative); else the plan's own
    technique with stand-ins for its unusable items."""
    lab = scenario.lab
    usable = _usable(scenario)
    eq = [canonical_id(e) for e in protocol.required_equipment]
    re = [canonical_id(r) for r in protocol.required_reagents]
    technique = scenario.techniques.get(canonical_id(protocol.technique))
    swaps = None
    if technique is not None and technique.id not in lab.banned and technique.min_days <= lab.time_limit_days:
        eq, re = _refit(technique, scenario, usable, eq, re)
        swaps = _slot_choices(technique, eq + re, usable)
        if swaps == {}:
            kept = _sized(protocol, scenario, technique, eq, re, usable)
            if kept is not None:
                return kept
    for alt, new_eq, new_re in _switches(technique, scenario, usable, eq, re):
        moved = _sized(protocol, scenario, alt, new_eq, new_re, usable)
        if moved is not None:
            return moved
    if swaps:
        return _sized(protocol, scenario, technique, [swaps.get(i, i) for i in eq], [swaps.get(i, i) for i in re],
                      usable)
    return None
