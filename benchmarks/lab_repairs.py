"""Whether the Lab Manager's repairs repair: each suggestion of a run's episodes, applied to the plan on the table,
checked against the lab's own check, and why the failing ones fail.

    python benchmarks/lab_repairs.py runs/NAME [--role lab_manager]

``--role`` picks the episodes by ``episodes.jsonl``'s ``role``: in a self-play run's ``lab_manager`` episodes
the policy is the lab, in its ``scientist`` episodes the lab is drawn from the Scientist's pool (scripted labs
among them); in an eval's cross-play the role names the pairing (``SCIENTIST vs LAB_MANAGER``).  A suggestion is what the Scientist sees in its next turn
(``replicalab.agents.brief.suggested_plan``: the plan with the suggestion applied); it *repairs* when the lab's
check (``replicalab.lab.feasibility.check_feasibility``) passes it on every dimension.  For the failing ones the
script counts each failed dimension, the suggestions that name an item the lab's catalog does not know, and
those that leave one of the technique's slots without an item.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

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


def tally(logs: list[EpisodeLog]) -> tuple[Counter, Counter]:
    """(repairs / failing / empty counts, reasons of the failing ones)."""
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a run directory (runs/NAME) with episodes.jsonl")
    parser.add_argument("--role", default="lab_manager",
                        help="the rows of episodes.jsonl with this role: a training run's lab_manager or scientist "
                             "episodes, or an eval's pairing (\"SCIENTIST vs LAB_MANAGER\")")
    args = parser.parse_args()
    path = args.run / "episodes.jsonl"
    if not path.is_file():
        raise SystemExit(f"no episodes.jsonl in {args.run}")
    rows = [json.loads(line) for line in path.open()]
    logs = [EpisodeLog.model_validate(row["log"]) for row in rows if row["role"] == args.role]
    if not logs:
        raise SystemExit(f"no episode of role {args.role!r} in {path}; its roles: "
                         + ", ".join(sorted({row['role'] for row in rows})))
    counts, reasons = tally(logs)
    offered = counts["repairs"] + counts["fails"]
    print(f"{args.run.name}, {args.role} episodes: {len(logs)}; suggestions {offered} "
          f"(and {counts['empty']} that changed nothing), repairs {counts['repairs']} ({counts['repairs'] / max(offered, 1):.3f})")
    print("| the failing suggestion | count | share of the failing |\n|---|---|---|")
    for reason, n in reasons.most_common():
        print(f"| {reason} | {n} | {n / max(counts['fails'], 1):.2f} |")


if __name__ == "__main__":
    main()
