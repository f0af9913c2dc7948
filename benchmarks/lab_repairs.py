"""Whether the Lab Manager's repairs repair: each suggestion of a run's episodes, applied to the plan on the table,
checked against the lab's own check, and why the failing ones fail.

    python benchmarks/lab_repairs.py runs/NAME [--role lab_manager]

``--role`` picks the episodes by ``episodes.jsonl``'s ``role``: in a self-play run's ``lab_manager`` episodes
the policy is the lab, in its ``scientist`` episodes the lab is drawn from the Scientist's pool (scripted labs
among them); in an eval's cross-play the role names the pairing (``SCIENTIST vs LAB_MANAGER``).  What counts as a
repair, and the reasons counted for the failing ones: ``training.bench.repairs``.  A training run's repairs are
also given per block of ``STEP_BLOCK`` steps, so a seat that learns to repair shows it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from replicalab.models import EpisodeLog
from training.bench.repairs import tally

#: Steps per block of the per-step view.
STEP_BLOCK = 8


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
    rows = [row for row in rows if row["role"] == args.role]
    logs = [EpisodeLog.model_validate(row["log"]) for row in rows]
    if not logs:
        raise SystemExit(f"no episode of role {args.role!r} in {path}; its roles: "
                         + ", ".join(sorted({json.loads(line)['role'] for line in path.open()})))
    counts, reasons = tally(logs)
    offered = counts["repairs"] + counts["fails"]
    print(f"{args.run.name}, {args.role} episodes: {len(logs)}; suggestions {offered} "
          f"(and {counts['empty']} that changed nothing), repairs {counts['repairs']} ({counts['repairs'] / max(offered, 1):.3f})")
    print("| the failing suggestion | count | share of the failing |\n|---|---|---|")
    for reason, n in reasons.most_common():
        print(f"| {reason} | {n} | {n / max(counts['fails'], 1):.2f} |")
    blocks: dict[int, list[EpisodeLog]] = {}
    for row, log in zip(rows, logs):
        blocks.setdefault(int(row.get("step", 0)) // STEP_BLOCK, []).append(log)
    if len(blocks) > 1:
        print("\n| steps | suggestions | repairs |\n|---|---|---|")
        for block, part in sorted(blocks.items()):
            c, _ = tally(part)
            n = c["repairs"] + c["fails"]
            print(f"| {block * STEP_BLOCK}-{block * STEP_BLOCK + STEP_BLOCK - 1} | {n} | "
                  f"{c['repairs']} ({c['repairs'] / max(n, 1):.3f}) |")


if __name__ == "__main__":
    main()
