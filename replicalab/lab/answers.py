"""Deterministic answers to ``request_info`` questions, from the lab's facts only.

The environment answers every question itself (a ``system`` entry of the dialogue, right after the
question), so the Lab Manager seat cannot lie about the lab.  An item the lab cannot use is answered with
the usable options that can stand in for it -- in the slots of the plan's technique when the item is one
of them -- which is the only way a Scientist learns a stand-in: the Lab Manager's suggestions never
volunteer one (``replicalab.lab.repair``).
"""

from __future__ import annotations

import re

from replicalab.lab.feasibility import HOURS_PER_STAFF_DAY
from replicalab.scenario_records import Scenario

TOPIC_WORDS = {
    "budget": ("budget", "cost", "afford", "money", "price", "funds", "spend"),
    "staff": ("staff", "people", "personnel", "technician", "hands", "who"),
    "schedule": ("day", "days", "time", "schedule", "deadline", "duration", "week", "weeks", "long"),
    "safety": ("safety", "safe", "restriction", "restrictions", "allowed", "permitted", "rule", "rules", "forbidden"),
}
_TOKEN = re.compile(r"[a-z0-9_]+")
#: Opens the environment's answer to a ``request_info`` turn (a ``system`` entry of the dialogue).
ANSWERS_PREFIX = "Lab records: "
#: Separates an unusable item's status from the options that can stand in for it.
ALTERNATIVES_MARKER = "; available alternatives: "
FALLBACK = "I can answer about the budget, named equipment or reagents, staff, the schedule and safety rules."


def _alternatives(item: str, scenario: Scenario, technique: str = "") -> list[str]:
    """Usable options sharing a slot with ``item``: in ``technique``'s slots when ``item`` is in one of
    them, else in any technique's."""
    free = (set(scenario.lab.equipment_available) | set(scenario.lab.reagents_in_stock)) - scenario.lab.banned
    alts: list[str] = []
    own = scenario.techniques.get(technique)
    scoped = own is not None and any(item in s for s in own.equipment_slots + own.reagent_slots)
    for t in ([own] if scoped else scenario.techniques.values()):
        for slot in t.equipment_slots + t.reagent_slots:
            if item in slot:
                alts += [o for o in slot if o != item and o in free and o not in alts]
    return alts


def _item_answer(item: str, scenario: Scenario, technique: str) -> str:
    lab = scenario.lab
    if item in scenario.techniques:
        if item in lab.banned:
            return f"{item}: not permitted here"
        return f"{item}: the lab runs it" if item in lab.routine_techniques else f"{item}: the lab cannot run it"
    if item in lab.banned:
        status = "forbidden by the safety rules"
    elif item in lab.equipment_available or item in lab.reagents_in_stock:
        return f"{item}: available"
    elif item in lab.equipment_booked:
        status = "booked during the window"
    elif item in lab.reagents_out_of_stock:
        status = "out of stock"
    else:
        status = "not in the lab"
    alts = _alternatives(item, scenario, technique)
    return f"{item}: {status}" + (f"{ALTERNATIVES_MARKER}{', '.join(alts)}" if alts else "")


def answer_question(question: str, scenario: Scenario, technique: str = "") -> str | None:
    """The answer to one question, or None when it asks about nothing the lab can answer; ``technique``
    (the plan's, canonical) scopes the stand-ins offered for an unusable item."""
    lab = scenario.lab
    tokens = _TOKEN.findall(question.lower())
    known = scenario.known_items()
    parts: list[str] = []
    words = set(tokens)
    if words.intersection(TOPIC_WORDS["budget"]):
        parts.append(f"budget: {lab.budget_total:.0f} in total")
    if words.intersection(TOPIC_WORDS["staff"]):
        parts.append(f"staff: {lab.staff_count} people, {HOURS_PER_STAFF_DAY:.0f} hours a day each")
    if words.intersection(TOPIC_WORDS["schedule"]):
        parts.append(f"time limit: {lab.time_limit_days} days")
    if words.intersection(TOPIC_WORDS["safety"]):
        rules = "; ".join(lab.safety_restrictions) or "no special restrictions"
        parts.append(f"safety rules: {rules}")
    for tok in dict.fromkeys(tokens):
        if tok in known or tok in scenario.techniques:
            parts.append(_item_answer(tok, scenario, technique))
    return "; ".join(parts) if parts else None


def answer_questions(questions: list[str], scenario: Scenario, technique: str = "") -> tuple[str, int]:
    """One answer text for all questions and how many of them were answerable."""
    answers, answered = [], 0
    for q in questions:
        a = answer_question(q, scenario, technique)
        answered += a is not None
        answers.append(a or FALLBACK)
    return " | ".join(answers), answered
