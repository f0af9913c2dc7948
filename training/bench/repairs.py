"""Whether a Lab Manager's suggestions repair: each one applied to the plan on the table and put to the lab's own
check (``replicalab.lab.feasibility.check_feasibility``), and why the failing ones fail.

A suggestion is what the Scientist sees in its next turn (``replicalab.agents.brief.suggested_plan``: the plan with
the suggestion applied); it *repairs* when the lab's check passes it on every dimension.  For the failing ones the
tally counts each failed dimension, the suggestions that name an item the lab's catalog does not know, and those
that leave one of the technique's slots without an item.  Read by ``replicalab bench lab-manager`` and
``benchmarks/lab_repairs.py``.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable

from replicalab.agents.brief import suggested_plan
from replicalab.episode import replayed_views
from replicalab.lab.feasibility import FeasibilityReport, check_feasibility
from replicalab.models import EpisodeLog, LabManagerActionType, Protocol
from replicalab.scenarios import generate_scenario

#: ``Protocol`` needs a rationale; the check never reads it.
RATIONALE = "the lab's suggestion applied"
UNKNOWN = "names an item the lab does not know"
EMPTY_SLOT = "leaves a slot of the technique without an item"


def suggestions(log: EpisodeLog) -> list[tuple[int, dict]]:
    """The plans the Scientist was offered in ``log``: (the index of the suggesting turn among the Lab Manager's
    turns, the plan on the table with the suggestion applied)."""
    out, suggested, index = [], None, -1
    for turn, view in replayed_views(log):
        if turn.role == "lab_manager":
            index += 1
            suggests = bool(turn.action) and turn.action.get("action_type") == LabManagerActionType.SUGGEST_ALTERNATIVE.value
            suggested = index if suggests else None
        elif suggested is not None:
            out.append((suggested, suggested_plan(view)))
            suggested = None
    return out


def checked(log: EpisodeLog) -> list[tuple[int, dict, FeasibilityReport | None]]:
    """Each suggestion of ``log`` (``suggestions``) with the lab's check of its plan (None: it changed nothing)."""
    scenario = generate_scenario(log.seed, log.scenario_template, log.difficulty)
    return [(index, plan, check_feasibility(Protocol(**plan, rationale=RATIONALE), scenario) if plan else None)
            for index, plan in suggestions(log)]


def tally(logs: Iterable[EpisodeLog]) -> tuple[Counter, Counter]:
    """(``repairs`` / ``fails`` / ``empty`` counts, the reasons of the failing ones)."""
    counts, reasons = Counter(), Counter()
    for log in logs:
        for _, _, report in checked(log):
            if report is None:
                counts["empty"] += 1
                continue
            counts["repairs" if report.ok else "fails"] += 1
            if not report.ok:
                reasons.update(report.failed)
                reasons.update([UNKNOWN] if report.unknown_items else [])
                reasons.update([EMPTY_SLOT] if report.missing_slots else [])
    return counts, reasons
