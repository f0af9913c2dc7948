"""Compare self-play runs with and without the opponent pool and the per-role baseline, from their logs.

    replicalab train --config configs/train/selfplay.yaml run_name=selfplay-pool
    replicalab train --config configs/train/selfplay.yaml run_name=selfplay-nopool 'seats.pools={}'
    replicalab train --config configs/train/selfplay.yaml run_name=selfplay-pool-rb grpo.advantage=role_baseline
    replicalab train --config configs/train/selfplay.yaml run_name=selfplay-nopool-rb 'seats.pools={}' \\
        grpo.advantage=role_baseline
    python benchmarks/selfplay_ablation.py runs/selfplay-pool runs/selfplay-nopool runs/selfplay-pool-rb \\
        runs/selfplay-nopool-rb

For each run: every seat's own validation reward against its fixed opponents at the first and the last check
(``val/<role>/reward``), the best check, the agreement and parse failure rates at the last check, and the
training episodes' agreement and per-role parse failure rates over the last 8 steps.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from training.trainer.curve import ROLE_NAMES, learning_curve

LAST_STEPS = 8


def _checks(rows: list[dict], role: str) -> list[dict]:
    return [row for row in rows if f"val/{role}/reward" in row]


def _tail_mean(rows: list[dict], key: str) -> float:
    values = [row[key] for row in rows[-LAST_STEPS:] if key in row and not math.isnan(row[key])]
    return sum(values) / len(values) if values else float("nan")


def summary(run_dir: Path) -> list[str]:
    rows = learning_curve(run_dir)
    lines = []
    for role, name in ROLE_NAMES.items():
        checks = _checks(rows, role)
        if not checks:
            continue
        first, last = checks[0], checks[-1]
        best = max(checks, key=lambda row: row[f"val/{role}/reward"])
        lines.append(
            f"| {run_dir.name} | {name} | {first[f'val/{role}/reward']:.2f} (step {int(first['step'])}) | "
            f"{last[f'val/{role}/reward']:.2f} (step {int(last['step'])}) | "
            f"{best[f'val/{role}/reward']:.2f} (step {int(best['step'])}) | "
            f"{last[f'val/{role}/agreement_rate']:.2f} | {last[f'val/{role}/parse_failure_rate']:.3f} | "
            f"{_tail_mean(rows, 'episode/agreement_rate'):.2f} | "
            f"{_tail_mean(rows, f'by_role/{role}/parse_failure_rate'):.3f} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run directories (runs/NAME)")
    args = parser.parse_args()
    print("| run | seat | first check | last check | best check | agreement (last) | parse failures (last) | "
          f"training agreement (last {LAST_STEPS} steps) | training parse failures (last {LAST_STEPS}) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for run in args.runs:
        lines = summary(run)
        print("\n".join(lines) if lines else f"| {run.name} | (no per-seat validation logged) |")


if __name__ == "__main__":
    main()
