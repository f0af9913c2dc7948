"""What each seat's action grammar is bound to (``rollout.sampling.constrained``): the names its own view gives it.

A grammar key (``grammar_key``) is a role's name (its plain grammar) or a binding as compact JSON:

- a Lab Manager's (``LabBinding``, from each turn's view: its lab is the same all episode, the plan on the table
  is not) states the lab's check of the plan as its flags, and ``feasible`` as their conjunction (a flag is a duty
  to report, never a move: an untrue one is an invalid turn), and offers only what its lab has: a suggestion names
  no technique, or one of its catalog the lab can run, and then one usable option of each slot, in slot order,
  before any other usable item; every suggested item is one the lab can use of its kind; a schedule is unchanged
  (0) or within the time limit and the technique's minimum days (``_lab_bound``);
- a Scientist's (``ScientistBinding``, from each turn's view: the dialogue names more as it goes) writes only names
  its brief or the dialogue gave it: a technique, equipment, reagents and controls from the brief's published
  protocol and the method it cross-checked with, the plan on the table, the lab's suggestions and the stand-ins the
  lab's answers offered; under a technique, each item list starts with the items one of those plans lists under it
  (each, or a stand-in offered for it), in its order, so which technique to take is one choice
  (``_scientist_bound``); a sample size is one its view stated (a plan's, the lab's suggested one, or the minimum
  the brief's power analysis gives) and a schedule one a plan or a suggestion stated.  Questions and rationales
  stay the model's.

``bound_schema`` applies a key's binding to its role's action schema."""

from __future__ import annotations

import copy
import json
from typing import Any, Literal, Optional, Sequence, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from replicalab.agents.brief import cross_check_method, minimum_sample_size, offered_stand_ins, published_protocol
from replicalab.dialogue import suggestion_in
from replicalab.models import LabManagerObservation, LabTechnique, ScientistObservation
from replicalab.parsing import ACTION_MODELS

_FROZEN = ConfigDict(frozen=True, extra="forbid")
#: A suggestion's item and control lists, as ``replicalab.dialogue`` renders them.
_LIST_SEPARATOR = ", "


class LabBinding(BaseModel):
    """What a Lab Manager's grammar is bound to at one turn: the lab's check of the plan on the table, flag by flag
    (``flags``: empty before any plan), the techniques of its lab's catalog it can run, each slot narrowed to the
    options it can use, the items it can use of each kind (owned, not booked, in stock) and its time limit.  A lab
    states its check and offers only what it has."""

    model_config = _FROZEN

    role: Literal["lab_manager"] = "lab_manager"
    lab_techniques: list[LabTechnique]
    equipment: list[str]
    reagents: list[str]
    time_limit_days: int = Field(ge=0)
    flags: dict[str, bool] = Field(default_factory=dict)


class NamedPlan(BaseModel):
    """A technique with the item lists a plan the Scientist was given names under it, one slot per item: the item,
    or a stand-in a lab answer offered for it."""

    model_config = _FROZEN

    technique: str
    equipment_slots: list[list[str]]
    reagent_slots: list[list[str]]


class ScientistBinding(BaseModel):
    """What a Scientist's grammar is bound to at one turn: the techniques, equipment, reagents and controls its
    brief and the dialogue so far have named, the plans that named each technique, and the sample sizes and
    schedules they stated.  A Scientist writes only names and numbers it was given, and under a technique, first
    the items a plan it was given lists under it."""

    model_config = _FROZEN

    role: Literal["scientist"] = "scientist"
    techniques: list[str]
    equipment: list[str]
    reagents: list[str]
    controls: list[str]
    plans: list[NamedPlan]
    sample_sizes: list[int] = Field(default_factory=list)
    durations: list[int] = Field(default_factory=list)


Binding = Union[LabBinding, ScientistBinding]
_BINDINGS = {"lab_manager": LabBinding, "scientist": ScientistBinding}


def lab_binding(view: LabManagerObservation) -> LabBinding:
    """The binding of the Lab Manager whose observation is ``view``: its flags the lab's check of the plan on the
    table (``plan_check``: a flag holds where the check found no reason against it); a technique stays when each of
    its slots has an option the lab can use and its minimum days fit the time limit, with those options only."""
    equipment, reagents = set(view.equipment_available), set(view.reagents_in_stock)
    runnable = []
    for t in view.lab_techniques:
        eq = [[o for o in slot if o in equipment] for slot in t.equipment_slots]
        re = [[o for o in slot if o in reagents] for slot in t.reagent_slots]
        if all(eq) and all(re) and t.min_days <= view.time_limit_days:
            runnable.append(LabTechnique(id=t.id, equipment_slots=eq, reagent_slots=re, min_days=t.min_days))
    flags = {flag: not reasons for flag, reasons in view.plan_check.items()}  # plan_check: empty before any plan
    return LabBinding(lab_techniques=runnable, equipment=sorted(equipment), reagents=sorted(reagents),
                      time_limit_days=view.time_limit_days, flags=flags)


def scientist_binding(view: ScientistObservation) -> ScientistBinding:
    """The binding of the Scientist whose observation is ``view``: every technique, item and control of the brief's
    two protocols, the plan on the table and the lab's suggestions; each stand-in an answer offered, of the kind of
    the item it stands in for."""
    named: dict[str, set[str]] = {"technique": set(), "required_equipment": set(), "required_reagents": set(),
                                  "controls": set()}
    plans = [published_protocol(view), cross_check_method(view)]
    if view.current_protocol is not None:
        plans.append(view.current_protocol.model_dump())
    numbers: dict[str, set[int]] = {"sample_size": {minimum_sample_size(view)}, "duration_days": set()}
    for plan in plans:
        for field, found in numbers.items():
            found.add(plan.get(field, 0))
    for entry in view.conversation_history:
        if entry.role == "lab_manager" and (suggested := suggestion_in(entry.message)):
            plans.append({"technique": suggested.get("technique", ""),
                          **{field: suggested.get(name, "").split(_LIST_SEPARATOR) for name, field in
                             (("equipment", "required_equipment"), ("reagents", "required_reagents"),
                              ("controls", "controls"))}})
            for field, found in numbers.items():
                found.add(int(suggested[field]) if suggested.get(field, "").isdigit() else 0)
    plans = [plan for plan in plans if plan.get("technique")]
    for plan in plans:
        named["technique"].add(plan["technique"])
        for field in ("required_equipment", "required_reagents", "controls"):
            named[field].update(plan.get(field, []))
    offered: dict[str, list[str]] = {}
    for item, stand_in in offered_stand_ins(view):
        offered.setdefault(item, []).append(stand_in)
        for field in ("required_equipment", "required_reagents"):
            if item in named[field] or item not in named["required_equipment"] | named["required_reagents"]:
                named[field].add(stand_in)
    clean = {field: sorted(n for n in names if n) for field, names in named.items()}
    tied: dict[str, NamedPlan] = {}
    for plan in plans:
        slots = {kind: [[item, *offered.get(item, [])] for item in plan.get(field, []) if item]
                 for kind, field in (("equipment_slots", "required_equipment"), ("reagent_slots", "required_reagents"))}
        named_plan = NamedPlan(technique=plan["technique"], **slots)
        tied.setdefault(named_plan.model_dump_json(), named_plan)
    return ScientistBinding(techniques=clean["technique"], equipment=clean["required_equipment"],
                            reagents=clean["required_reagents"], controls=clean["controls"], plans=list(tied.values()),
                            sample_sizes=sorted(n for n in numbers["sample_size"] if n > 0),
                            durations=sorted(n for n in numbers["duration_days"] if n > 0))


def grammar_key(role: str, view: Optional[Union[LabManagerObservation, ScientistObservation]] = None) -> str:
    """The key of the grammar a ``role`` seat replies under: with the seat's current ``view``, its binding as
    compact JSON; without one, the role's name (its plain grammar)."""
    if view is None:
        return role
    if role == "lab_manager" and isinstance(view, LabManagerObservation):
        return lab_binding(view).model_dump_json()
    if role == "scientist" and isinstance(view, ScientistObservation):
        return scientist_binding(view).model_dump_json()
    raise ValueError(f"a {role} grammar is not bound to a {type(view).__name__}")


def key_parts(key: str) -> tuple[str, Optional[Binding]]:
    """(role, binding or None) of a ``grammar_key``; a one-line ``ValueError`` for anything else."""
    if key in ACTION_MODELS:
        return key, None
    try:
        found = json.loads(key)
    except ValueError:
        found = None
    role = found.get("role") if isinstance(found, dict) else None
    if isinstance(role, str) and role not in ACTION_MODELS:
        raise ValueError(f"no action grammar for role {role!r}; roles: {', '.join(ACTION_MODELS)}")
    if role not in _BINDINGS:
        raise ValueError(f"not an action grammar key: {key[:80]!r}; roles: {', '.join(ACTION_MODELS)}")
    try:
        return role, _BINDINGS[role].model_validate(found)
    except ValidationError:
        raise ValueError(f"not an action grammar key: {key[:80]!r}; roles: {', '.join(ACTION_MODELS)}") from None


def bound_schema(schema: dict[str, Any], binding: Binding) -> dict[str, Any]:
    """A role's action ``schema`` (properties in canonical order, no other keys) bound to ``binding``."""
    if isinstance(binding, LabBinding):
        return _lab_bound(schema, binding)
    return _scientist_bound(schema, binding)


def _scientist_bound(schema: dict[str, Any], binding: ScientistBinding) -> dict[str, Any]:
    """The Scientist's ``schema`` with each name it writes one of ``binding``'s (a kind with none named stays free)
    and, where plans named a technique, one branch per plan: its technique, then each item list starting with one
    option of each of the plan's slots, in order, before any other named item of the kind."""
    bound = copy.deepcopy(schema)
    props = bound["properties"]
    for field, names in (("technique", binding.techniques), ("required_equipment", binding.equipment),
                         ("required_reagents", binding.reagents), ("controls", binding.controls),
                         ("sample_size", binding.sample_sizes), ("duration_days", binding.durations)):
        if not names:
            continue
        if props[field].get("type") == "array":
            props[field] = {**props[field], "items": {"enum": list(names)}}
        else:
            props[field] = {**{k: v for k, v in props[field].items() if k not in ("type", "maxLength", "minimum")},
                            "enum": list(names)}
    if not binding.plans:
        return bound
    defs = bound.pop("$defs", {})
    branches = []
    for plan in binding.plans:
        branch = copy.deepcopy(bound)
        branch["properties"]["technique"] = {"const": plan.technique}
        for field, slots in (("required_equipment", plan.equipment_slots),
                             ("required_reagents", plan.reagent_slots)):
            if slots:
                branch["properties"][field] = {**branch["properties"][field], "minItems": len(slots),
                                               "prefixItems": [{"enum": slot} for slot in slots]}
        branches.append(branch)
    return {"$defs": defs, "anyOf": branches}


def _lab_bound(schema: dict[str, Any], binding: LabBinding) -> dict[str, Any]:
    """The Lab Manager's ``schema`` bound to its lab: each flag the lab's check (where it has one) and ``feasible``
    their conjunction, every suggested item one the lab can use of its kind and every suggested schedule within the
    time limit; one branch that names no technique, and one per runnable technique that names it, each item list
    empty or one usable option of each slot in slot order first, and a schedule unchanged (0) or from the
    technique's minimum days."""
    schema = copy.deepcopy(schema)
    defs = schema.pop("$defs", {})
    if binding.flags:
        schema["properties"].update({flag: {"const": ok} for flag, ok in binding.flags.items()},
                                    feasible={"const": all(binding.flags.values())})
    return {"$defs": defs, "anyOf": [_branch(schema, binding, None),
                                     *(_branch(schema, binding, t) for t in binding.lab_techniques)]}


def _branch(schema: dict[str, Any], binding: LabBinding, technique: Optional[LabTechnique]) -> dict[str, Any]:
    """One branch of a bound ``schema``: a suggestion under ``technique`` (None: naming none, the plan's stays)."""
    branch = copy.deepcopy(schema)
    slots = technique or LabTechnique(id="")
    branch["properties"].update(suggested_technique={"const": slots.id},
                                suggested_equipment=_listed(slots.equipment_slots, binding.equipment),
                                suggested_reagents=_listed(slots.reagent_slots, binding.reagents),
                                suggested_duration_days=_days(slots.min_days, binding.time_limit_days))
    if technique is not None:
        branch["required"] = [*branch.get("required", []), "suggested_technique"]
    return branch


def _listed(slots: Sequence[Sequence[str]], usable: Sequence[str]) -> dict[str, Any]:
    """An item list of a technique with ``slots`` (none: the plan's own technique): empty (the plan's list stays),
    or one option of each slot in slot order followed by other ``usable`` items."""
    if not slots and not usable:
        return {"type": "array", "maxItems": 0}
    extra: dict[str, Any] = {"items": {"enum": list(usable)}} if usable else {"maxItems": len(slots)}
    filled = {"type": "array", "minItems": max(len(slots), 1), **extra}
    if slots:
        filled["prefixItems"] = [{"enum": list(slot)} for slot in slots]
    return {"anyOf": [{"type": "array", "maxItems": 0}, filled]}


def _days(least: int, limit: int) -> dict[str, Any]:
    """A suggested schedule: 0 (unchanged) or from ``least`` (at least 1) to ``limit`` days."""
    if max(least, 1) > limit:
        return {"const": 0}
    return {"anyOf": [{"const": 0}, {"type": "integer", "minimum": max(least, 1), "maximum": limit}]}
