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
from replicalab.lab.feasibility import check_feasibility
from replicalab.models import EpisodeLog, LabManagerActionType, Protocol
from replicalab.scenarios import generate_scenario

#: ``Protocol`` needs a rationale; the check never reads it.
RATIONALE = "the lab's suggestion applied"
UNKNOWN = "names an item the lab does not know"
EMPTY_SLOT = "leaves a slot of the technique without an item"


def suggestions(log: EpisodeLog) -> list[dict]:
    """The plans the Scientist was offered in ``log``: the plan on the table with each suggestion applied."""
    out, suggested = [], False
    for turn, view in replayed_views(log):
        if turn.role == "lab_manager":
            suggested = bool(turn.action) and turn.action.get("action_type") == LabManagerActionType.SUGGEST_ALTERNATIVE.value
        elif suggested:
            out.append(suggested_plan(view))
            suggested = False
    return out


def tally(logs: Iterable[EpisodeLog]) -> tuple[Counter, Counter]:
    """(``repairs`` / ``fails`` / ``empty`` counts, the reasons of the failing ones)."""
    counts, reasons = Counter(), Counter()
    for log in logs:
        scenario = generate_scenario(log.seed, log.scenario_template, log.difficulty)
        for plan in suggestions(log):
            if not plan:
                counts["empty"] += 1
                continue
            report = check_feasibility(Protocol(**plan, rationale=RATIONALE), scenario)
            counts["repairs" if report.ok else "fails"] += 1
            if not report.ok:
                reasons.update(report.failed)
                reasons.update([UNKNOWN] if report.unknown_items else [])
                reasons.update([EMPTY_SLOT] if report.missing_slots else [])
    return counts, reasons
