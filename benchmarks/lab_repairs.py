"""Whether the Lab Manager's repairs repair: each suggestion of a run's episodes, applied to the plan on the table,
checked against the lab's own check, and why the failing ones fail.

    python benchmarks/lab_repairs.py runs/NAME [--role lab_manager]

``--role`` picks the episodes by ``episodes.jsonl``'s ``role``: in a self-play run's ``lab_manager`` episodes
the policy is the lab, in its ``scientist`` episodes the lab is drawn from the Scientist's pool (scripted labs
among them); in an eval's cross-play the role names the pairing (``SCIENTIST vs LAB_MANAGER``).  What counts as a
repair, and the reasons counted for the failing ones: ``training.bench.repairs``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from replicalab.models import EpisodeLog
from training.bench.repairs import tally


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
