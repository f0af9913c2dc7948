"""Deterministic answers to ``request_info`` questions, from the lab's facts only."""

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
FALLBACK = "I can answer about the budget, named equipment or reagents, staff, the schedule and safety rules."


def _alternatives(item: str, scenario: Scenario) -> list[str]:
    free = set(scenario.lab.equipment_available) | set(scenario.lab.reagents_in_stock)
    alts: list[str] = []
    for t in scenario.techniques.values():
        for slot in t.equipment_slots + t.reagent_slots:
            if item in slot:
                alts += [o for o in slot if o != item and o in free and o not in alts]
    return alts


def _item_answer(item: str, scenario: Scenario) -> str:
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
    alts = _alternatives(item, scenario)
    return f"{item}: {status}" + (f"; available alternatives: {', '.join(alts)}" if alts else "")


def answer_question(question: str, scenario: Scenario) -> str | None:
    """The answer to one question, or None when it asks about nothing the lab can answer."""
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
            parts.append(_item_answer(tok, scenario))
    return "; ".join(parts) if parts else None


def answer_questions(questions: list[str], scenario: Scenario) -> tuple[str, int]:
    """One answer text for all questions and how many of them were answerable."""
    answers, answered = [], 0
    for q in questions:
        a = answer_question(q, scenario)
        answered += a is not None
        answers.append(a or FALLBACK)
    return " | ".join(answers), answered
