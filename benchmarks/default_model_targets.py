"""Build the embedded default model and measure it against its targets, printing each figure.

    python benchmarks/default_model_targets.py [--out DIR] [--seeds 10]

Targets: the build takes at most 10 minutes on 2 cores; on validation seeds at least 95% of its turns
parse into valid actions in both seats; as the Scientist against the scripted Lab Manager its mean
reward is at least the naive Scientist's on the same seeds.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from replicalab import VALIDATION_SEEDS

BUILD_SECONDS_TARGET = 600
PARSE_RATE_TARGET = 0.95


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="where to build (default: a scratch directory)")
    parser.add_argument("--seeds", type=int, default=10, help="validation seeds per template x difficulty")
    args = parser.parse_args()
    from training.eval.seat_check import evaluate_model_seats
    from training.model.default import build_default_model

    out = Path(args.out or tempfile.mkdtemp(prefix="replicalab-default-"))
    model = build_default_model(out, progress=True)
    info = json.loads((model / "build_info.json").read_text())
    report = evaluate_model_seats(model, list(VALIDATION_SEEDS)[: args.seeds])
    rows = [
        ("build seconds", info["build_seconds"], f"<= {BUILD_SECONDS_TARGET}", info["build_seconds"] <= BUILD_SECONDS_TARGET),
        ("scientist parse rate", report.scientist.parse_rate, f">= {PARSE_RATE_TARGET}",
         report.scientist.parse_rate >= PARSE_RATE_TARGET),
        ("lab manager parse rate", report.lab_manager.parse_rate, f">= {PARSE_RATE_TARGET}",
         report.lab_manager.parse_rate >= PARSE_RATE_TARGET),
        ("scientist mean reward", report.scientist.mean_reward, f">= naive {report.naive_scientist_mean_reward:.2f}",
         report.scientist.mean_reward >= report.naive_scientist_mean_reward),
    ]
    print(f"default model at {model}; {report.scientist.episodes} validation episodes per seat")
    for name, value, target, ok in rows:
        print(f"  {name:<24} {value:10.3f}   target {target:<16} {'met' if ok else 'MISSED'}")


if __name__ == "__main__":
    main()
