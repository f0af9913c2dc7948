"""The parametric scenario generator shared by every template family.

From ``(domain, seed, difficulty)`` it samples prices, workloads, the paper (technique, controls,
sample size, duration, critical items), the hidden reference, and then builds the lab around a
feasible reference protocol so that every scenario is solvable:

- easy:   the paper's own protocol is feasible;
- medium: one or two planted conflicts (an item missing, budget, time, staff) that need a
          substitution or a smaller plan; with an unusable item, the lab's next technique stays
          runnable (the lab moves a plan there rather than volunteer the item's stand-in);
- hard:   the paper's technique is blocked (safety rule or missing equipment) and budget and time are
          tight; the lab's preferred alternative is a low-fidelity technique.

The key finding states the smallest sample size a power analysis allows (the judge's minimum), in prose and as
``{"sample_size":N}``.  The paper's method states the published protocol and, as what it changes in that protocol, the
orthogonal method the authors cross-checked their readout with (the close substitute of the hidden reference):
its technique, the equipment and reagents it swaps out and in (its first-option items for the published
technique's own; the paper's critical items stay) and its duration where that differs.  A Scientist that reads
the brief can steer a blocked technique toward the high-fidelity substitute rather than the lab's preference
(``replicalab.agents.brief.cross_check_method`` applies the changes); the brief states one complete protocol only.

All randomness comes from one ``random.Random`` seeded by ``(template, difficulty, seed)``.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from functools import lru_cache
from itertools import filterfalse
from operator import itemgetter

from replicalab.lab.feasibility import HOURS_PER_STAFF_DAY, check_feasibility, plan_cost
from replicalab.models import Protocol
from replicalab.scenario_records import (
    CROSS_CHECK_MARKER,
    POWER_STATEMENT,
    PUBLISHED_MARKER,
    Domain,
    LabFacts,
    ReferenceSpec,
    Scenario,
    Technique,
    TechniqueSpec,
)
from replicalab.trusted import trusted

WORKLOAD_JITTER = (0.8, 1.25)
MIN_SAMPLE_FRACTION = (0.5, 0.7)
CONTROLS_PER_PAPER = (2, 3)
EXTRA_DAYS = (1, 4)
MAX_DAYS_CUT = 2
CLOSE_SUBSTITUTE_COST = (0.02, 0.08)
FAR_SUBSTITUTE_COST = (0.55, 0.85)
OPTION_COST = (0.02, 0.08)
BUDGET_SLACK_LOOSE = (1.15, 1.6)
BUDGET_SLACK_TIGHT = (1.0, 1.04)
TIME_SLACK_LOOSE = (1, 5)
STAFF_SLACK = (1.2, 2.0)
NOISE_STATES = ("free", "free", "blocked", "absent")
MEDIUM_CONFLICTS = ("budget", "time", "staff")
MEDIUM_ITEM_CONFLICT_P = 0.7  # a medium scenario's chance of an unusable item (with a stand-in) among its conflicts
HARD_OPTIONAL_CONFLICT_P = {"item": 0.7, "staff": 0.5}  # each optional hard conflict's chance


#: The compact JSON of the paper method's protocol statements.
_COMPACT_JSON = json.JSONEncoder(separators=(",", ":"))


def _u(rng: random.Random, bounds: tuple[float, float], digits: int = 2) -> float:
    return round(rng.uniform(*bounds), digits)


def _draws(rng: random.Random, keys, bounds: tuple[float, float], digits: int = 2) -> dict:
    """``{key: _u(rng, bounds, digits) for key in keys}``: one draw per key, in order (a repeated key keeps its
    last), with ``rng.uniform``'s documented formula ``a + (b - a) * random()`` inlined -- the same draws and
    values, without two Python-level calls (``_u``, ``uniform``) per key."""
    low, high = bounds
    span, draw = high - low, rng.random
    return {k: round(low + span * draw(), digits) for k in keys}


@dataclass(frozen=True, slots=True)
class _Catalog:
    """A domain's ids in the orders generation draws over them (fixed per domain, so computed once)."""

    technique_ids: tuple[str, ...]  # sorted
    equipment_ids: tuple[str, ...]  # sorted, every option of every equipment slot
    slot_reagents: tuple[str, ...]  # sorted, every option of every reagent slot
    critical: tuple[str, ...]  # subjects, then treatments
    reagent_ids: tuple[str, ...]  # sorted: slot reagents and critical items
    options: tuple[str, ...]  # every slot option but the first, in the domain's order (repeats kept)


@lru_cache(maxsize=None)
def _catalog(techniques: tuple[TechniqueSpec, ...], subjects: tuple[str, ...],
             treatments: tuple[str, ...]) -> _Catalog:
    slot_reagents = sorted({i for t in techniques for s in t.reagent_slots for i in s})
    return _Catalog(
        technique_ids=tuple(sorted(t.id for t in techniques)),
        equipment_ids=tuple(sorted({i for t in techniques for s in t.equipment_slots for i in s})),
        slot_reagents=tuple(slot_reagents),
        critical=subjects + treatments,
        reagent_ids=tuple(sorted({*slot_reagents, *subjects, *treatments})),
        options=tuple(opt for t in techniques for s in t.equipment_slots + t.reagent_slots for opt in s[1:]),
    )


def _readable(item: str) -> str:
    return item.replace("_", " ")


_first = itemgetter(0)


def _below(rng: random.Random, n: int) -> int:
    """A random int in ``[0, n)`` drawn as ``Random.choice`` and ``Random.randrange`` draw it (CPython 3.11 to
    3.13: ``getrandbits(n.bit_length())`` until it is below ``n``), in one Python-level call instead of their
    two or three: ``rng.randint(a, b) == a + _below(rng, b - a + 1)`` for the same state."""
    bits = n.bit_length()
    r = rng.getrandbits(bits)
    while r >= n:
        r = rng.getrandbits(bits)
    return r


def _noise(rng: random.Random, ids: tuple[str, ...]) -> dict[str, str]:
    """``{i: rng.choice(NOISE_STATES) for i in ids}``, drawn as ``_below`` draws, inlined: the same draws,
    the same states."""
    n = len(NOISE_STATES)
    bits, width = rng.getrandbits, n.bit_length()
    state = {}
    for i in ids:
        r = bits(width)
        while r >= n:
            r = bits(width)
        state[i] = NOISE_STATES[r]
    return state


def _first_options(technique: Technique) -> tuple[list[str], list[str]]:
    return list(map(_first, technique.equipment_slots)), list(map(_first, technique.reagent_slots))


def _by_state(ids: tuple[str, ...], state: dict[str, str]) -> dict[str, tuple[str, ...]]:
    """The ``ids`` of each state (``NOISE_STATES``), in order."""
    groups: dict[str, list[str]] = {s: [] for s in NOISE_STATES}
    for i in ids:
        groups[state[i]].append(i)
    return {s: tuple(items) for s, items in groups.items()}


def _pick_conflicts(rng: random.Random, difficulty: str) -> set[str]:
    if difficulty == "easy":
        return set()
    if difficulty == "medium":
        count = rng.randint(1, 2)
        conflicts = {"item"} if rng.random() < MEDIUM_ITEM_CONFLICT_P else set()
        return conflicts | set(rng.sample(MEDIUM_CONFLICTS, count - len(conflicts)))
    conflicts = {"technique", "budget", "time"}
    for extra, chance in HARD_OPTIONAL_CONFLICT_P.items():
        if rng.random() < chance:
            conflicts.add(extra)
    return conflicts


def cross_check_changes(equipment: list[str], reagents: list[str], technique: str, new_equipment: list[str],
                        new_reagents: list[str], days: int, new_days: int) -> dict:
    """The cross-check method as what it changes in the published protocol: its technique, each item kind's
    ``out`` (published items it does not use) and ``in`` (its items the published protocol lacks), and
    ``duration_days`` only where it differs."""
    change: dict = {"technique": technique}
    if new_days != days:
        change["duration_days"] = new_days
    for key, old, new in (("equipment", equipment, new_equipment), ("reagents", reagents, new_reagents)):
        change[key] = {"out": [i for i in old if i not in new], "in": [i for i in new if i not in old]}
    return change


def build_scenario(domain: Domain, seed: int, difficulty: str) -> Scenario:
    rng = random.Random(f"{domain.name}/{difficulty}/{seed}")
    catalog = _catalog(domain.techniques, domain.subjects, domain.treatments)
    specs = {t.id: t for t in domain.techniques}
    jitter_low, jitter_high = WORKLOAD_JITTER
    jitter_span, draw = jitter_high - jitter_low, rng.random
    techniques = {  # rng.uniform(*WORKLOAD_JITTER) inlined (see _draws), rng.randint(0, 1) as _below
        t.id: Technique(
            t.id, t.equipment_slots, t.reagent_slots,
            round(t.hours_per_sample * (jitter_low + jitter_span * draw()), 3), t.min_days + _below(rng, 2),
        )
        for t in domain.techniques
    }
    equipment_ids = catalog.equipment_ids
    fees = _draws(rng, equipment_ids, domain.equipment_fee_range)
    costs = _draws(rng, catalog.slot_reagents, domain.reagent_cost_range)
    costs.update(_draws(rng, catalog.critical, domain.critical_cost_range))
    control_costs = _draws(rng, domain.controls, domain.control_cost_range)

    # The paper.
    t0 = rng.choice(catalog.technique_ids)
    others = list(catalog.technique_ids)  # sorted
    others.remove(t0)
    rng.shuffle(others)
    t_close, far = others[0], others[1:]
    subject, treatment = rng.choice(domain.subjects), rng.choice(domain.treatments)
    n0 = rng.randint(*domain.sample_size_range)
    min_n = max(1, math.ceil(n0 * rng.uniform(*MIN_SAMPLE_FRACTION)))
    d0 = techniques[t0].min_days + rng.randint(*EXTRA_DAYS)
    controls = sorted(rng.sample(domain.controls, rng.randint(*CONTROLS_PER_PAPER)))
    substitutes = {t0: 0.0, t_close: _u(rng, CLOSE_SUBSTITUTE_COST, 3)}
    substitutes.update(_draws(rng, far, FAR_SUBSTITUTE_COST, 3))
    option_costs = _draws(rng, catalog.options, OPTION_COST, 3)
    critical = (subject, treatment)
    paper_eq, paper_re = _first_options(techniques[t0])
    paper = trusted(  # built from the domain's valid ids: nothing to validate
        Protocol, sample_size=n0, controls=list(controls), technique=t0, duration_days=d0,
        required_equipment=paper_eq, required_reagents=paper_re + list(critical),
        rationale=f"The published protocol of the paper, run with {_readable(subject)}.",
    )

    # The reference plan: the paper's, repaired for each planted conflict.
    conflicts = _pick_conflicts(rng, difficulty)
    tref = t_close if "technique" in conflicts else t0
    ref_eq, ref_re = _first_options(techniques[tref])
    conflict_item = ""
    if "item" in conflicts:
        slots = [(k, s) for k, s in enumerate(techniques[tref].equipment_slots + techniques[tref].reagent_slots) if len(s) > 1]
        if slots:
            k, slot = rng.choice(slots)
            conflict_item = slot[0]
            n_eq = len(ref_eq)
            if k < n_eq:
                ref_eq[k] = slot[1]
            else:
                ref_re[k - n_eq] = slot[1]
        else:  # no slot of this technique has an alternative: squeeze the budget instead
            conflicts.add("budget")
    ref_min_days = techniques[tref].min_days
    if "time" in conflicts and ref_min_days < d0:
        time_limit = rng.randint(max(ref_min_days, d0 - MAX_DAYS_CUT), d0 - 1)
        d_ref = time_limit
    else:
        d_ref = max(d0, ref_min_days)
        time_limit = d_ref + rng.randint(*TIME_SLACK_LOOSE)
    n_ref = n0
    if conflicts & {"budget", "staff"}:
        n_ref = rng.randint(min_n, max(min_n, n0 - max(1, (n0 - min_n) // 3)))
    reference = trusted(
        Protocol, sample_size=n_ref, controls=list(controls), technique=tref, duration_days=d_ref,
        required_equipment=ref_eq, required_reagents=ref_re + list(critical),
        rationale="Reference plan: the paper's protocol adapted to this lab.",
    )

    # Staff and budget, sized around the reference.
    def cost(p: Protocol) -> float:
        return plan_cost(fees, costs, control_costs, p.required_equipment, p.required_reagents, p.controls,
                         p.sample_size, p.duration_days)

    need_ref = n_ref * techniques[tref].hours_per_sample / (d_ref * HOURS_PER_STAFF_DAY)
    need_paper = n0 * techniques[t0].hours_per_sample / (d0 * HOURS_PER_STAFF_DAY)
    if "staff" in conflicts and math.ceil(need_ref) < need_paper:
        staff = max(1, math.ceil(need_ref))
    else:
        if "staff" in conflicts:  # the workload is too light for a staff conflict: squeeze the budget instead
            conflicts.add("budget")
        staff = max(1, math.ceil(max(need_ref, need_paper) * rng.uniform(*STAFF_SLACK)))

    cost_ref, cost_paper = cost(reference), cost(paper)
    if "budget" in conflicts and cost_ref < cost_paper:
        budget = min(cost_ref * rng.uniform(*BUDGET_SLACK_TIGHT), (cost_ref + cost_paper) / 2)
    else:
        budget = max(cost_ref, cost_paper) * rng.uniform(*BUDGET_SLACK_LOOSE)
    budget = float(math.ceil(budget))
    # The lab's inventory.
    banned: set[str] = set()
    restrictions: list[str] = []
    protected = set(reference.required_equipment) | set(reference.required_reagents)
    runs = [t0] + far + [t_close]
    if "technique" in conflicts:
        t_far = far[0]
        runs = [t_far, tref] + far[1:]
        protected |= {s[0] for s in techniques[t_far].equipment_slots + techniques[t_far].reagent_slots}
    elif difficulty == "easy" or not conflict_item:
        protected |= set(paper.required_equipment) | set(paper.required_reagents)
    else:
        protected |= (set(paper.required_equipment) | set(paper.required_reagents)) - {conflict_item}
        # The lab's next technique stays runnable: it moves a plan there rather than volunteer a stand-in.
        protected |= {next(o for o in s if o != conflict_item) for s in techniques[far[0]].equipment_slots
                      + techniques[far[0]].reagent_slots if any(o != conflict_item for o in s)}
    reagent_ids = catalog.reagent_ids  # == sorted(costs)
    state = _noise(rng, equipment_ids + reagent_ids)
    state.update(dict.fromkeys(protected, "free"))
    if conflict_item:
        state[conflict_item] = rng.choice(("blocked", "absent"))
    if "technique" in conflicts:
        blockable = [s for s in techniques[t0].equipment_slots if not protected.intersection(s)]
        if blockable and rng.random() < 0.5:
            for item in rng.choice(blockable):
                state[item] = rng.choice(("blocked", "absent"))
        else:
            banned.add(t0)
            hazard = specs[t0].hazard
            rule = domain.hazards.get(hazard, "") if hazard else ""
            restrictions.append(f"{t0} is not permitted in this lab" + (f": {rule}" if rule else ""))
    for t in far[1:]:
        hazard = specs[t].hazard
        if hazard and t not in runs[:2] and rng.random() < 0.5:
            banned.add(t)
            restrictions.append(f"{t} is not permitted in this lab: {domain.hazards[hazard]}")
    routine = tuple(filterfalse(banned.__contains__, runs))

    equipment, reagents = _by_state(equipment_ids, state), _by_state(reagent_ids, state)
    lab = LabFacts(
        budget_total=budget,
        equipment_available=equipment["free"],
        equipment_booked=equipment["blocked"],
        reagents_in_stock=reagents["free"],
        reagents_out_of_stock=reagents["blocked"],
        staff_count=staff,
        time_limit_days=time_limit,
        safety_restrictions=tuple(restrictions),
        banned=frozenset(banned),
        routine_techniques=routine,
    )
    spec = ReferenceSpec(
        required_controls=tuple(controls), min_sample_size=min_n, core_technique=t0,
        substitutes=substitutes, option_costs=option_costs, critical_items=critical,
    )
    fmt = dict(subject=_readable(subject), treatment=_readable(treatment), technique=_readable(t0))
    published = _COMPACT_JSON.encode({
        "sample_size": n0, "controls": controls, "technique": t0, "duration_days": d0,
        "required_equipment": paper.required_equipment, "required_reagents": paper.required_reagents,
    })
    close_eq, close_re = _first_options(techniques[t_close])
    cross_check = _COMPACT_JSON.encode(cross_check_changes(
        paper.required_equipment, paper.required_reagents, t_close, close_eq, close_re + list(critical),
        d0, max(d0, techniques[t_close].min_days)))
    scenario = Scenario(
        seed=seed, template=domain.name, difficulty=difficulty,
        paper_title=rng.choice(domain.title_templates).format(**fmt),
        paper_hypothesis=domain.hypothesis_template.format(**fmt),
        paper_method=f"{specs[t0].description} {CROSS_CHECK_MARKER} {cross_check}. {PUBLISHED_MARKER} {published}",
        paper_key_finding=domain.finding_template.format(n=n0, unit=domain.sample_unit, **fmt) + " "
        + POWER_STATEMENT.format(n=min_n, unit=domain.sample_unit),
        experiment_goal=domain.goal_template.format(**fmt),
        paper_protocol=paper, techniques=techniques, equipment_fees=fees, reagent_costs=costs,
        control_costs=control_costs, lab=lab, reference=spec, reference_protocol=reference,
    )
    report = check_feasibility(reference, scenario)
    if not report.ok:  # a generator bug, never bad user input
        raise AssertionError(f"reference protocol infeasible for {domain.name}/{difficulty}/{seed}: {report.reasons}")
    return scenario
