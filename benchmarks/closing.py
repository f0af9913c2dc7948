"""Whether a Scientist takes the deal once the lab has accepted: its moves at its close chances.

    python benchmarks/closing.py DIR [DIR ...] [--window 8]

``DIR`` is a training run or an evaluation output (its ``episodes.jsonl``).  A Scientist's turn right after the
Lab Manager accepted its plan (``training.rollout.branch.closing_turns``) ends the episode with an agreement when
it accepts; any other move costs a round and, near the round limit, the agreement.  Per seat (an evaluation's
``AGENT`` or ``AGENT vs LAB`` label; a training run's Scientist rows by step, the first and the last ``--window``
steps) the script prints those turns, the share of them that played on instead of taking the deal, and the
episodes without an agreement in which the Scientist had played on after an accept.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

from replicalab.models import EpisodeLog
from training.rollout.branch import closing_turns


def _label(row: dict, last_step: int, window: int) -> str | None:
    """The seat a row counts under; None for a Lab Manager row of a training run, or a middle step."""
    if row["role"] == "lab_manager":
        return None
    if row["role"] != "scientist":
        return row["role"]
    if row["step"] < window:
        return f"scientist, steps 0-{window - 1}"
    if row["step"] > last_step - window:
        return f"scientist, steps {last_step - window + 1}-{last_step}"
    return None


def closing(path: Path, window: int) -> dict[str, list[int]]:
    """{seat: [close chances, played on, episodes, episodes lost after playing on]} of one ``episodes.jsonl``."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    last_step = max((row.get("step", 0) for row in rows), default=0)
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for row in rows:
        label = _label(row, last_step, window)
        if label is None:
            continue
        log = EpisodeLog.model_validate(row["log"])
        closing_at = closing_turns(log)
        played_on = [turn for turn, took in closing_at.items() if not took]
        counts = out[label]
        counts[0] += len(closing_at)
        counts[1] += len(played_on)
        counts[2] += 1
        counts[3] += bool(played_on) and not log.agreement_reached
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dirs", type=Path, nargs="+", help="training runs or evaluation output directories")
    parser.add_argument("--window", type=int, default=8, help="steps at each end of a training run (default 8)")
    args = parser.parse_args()
    print("| output | seat | turns after the lab accepted | played on | episodes | lost after playing on |")
    print("|---|---|---|---|---|---|")
    for folder in args.dirs:
        path = folder / "episodes.jsonl"
        if not path.is_file():
            raise SystemExit(f"{folder} holds no episodes.jsonl: give a training run or an evaluation output")
        for seat, (chances, played_on, episodes, lost) in sorted(closing(path, args.window).items()):
            share = f"{played_on / chances:.2f}" if chances else "-"
            print(f"| {folder.name} | {seat} | {chances} | {played_on} ({share}) | {episodes} | {lost} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
