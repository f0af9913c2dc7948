"""Print a run's learning curve and draw it: reward, hard-cell reward and the Scientist's revise rates by step.

    python benchmarks/learning_curve.py runs/scientist-vs-scripted [--window 8]

Reads ``metrics.jsonl`` of the run directory (``training.trainer.curve``); writes ``learning_curve.png`` there,
and for a run that validated every seat (self-play) the per-seat checks as a table and ``seats_curve.png``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from training.trainer.curve import (
    CURVE_PNG,
    SEATS_PNG,
    curve_table,
    learning_curve,
    plot_learning_curve,
    plot_seat_curves,
    seat_table,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--window", type=int, default=8, help="steps per table line and moving average")
    args = parser.parse_args()
    rows = learning_curve(args.run_dir)
    if not rows:
        sys.exit(f"learning_curve: no metrics.jsonl rows under {args.run_dir}")
    print(curve_table(rows, args.window), end="")
    print(f"plot: {plot_learning_curve(rows, args.run_dir / CURVE_PNG, args.window)}")
    seats = plot_seat_curves(rows, args.run_dir / SEATS_PNG, args.window)
    if seats is not None:
        print(seat_table(rows), end="")
        print(f"plot: {seats}")


if __name__ == "__main__":
    main()
