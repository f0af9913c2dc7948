"""Did training learn? The trained default against its baselines over several training seeds.

    python benchmarks/learning_claim.py REPORT_DIR_OR_JSON... [--trained-prefix model:runs/]

Each argument is one training seed's ``replicalab eval`` report (``report.json``, or the directory holding it), all
on the same test seeds.  For each, the trained agent (the first agent whose spec starts with ``--trained-prefix``)
is compared with the naive and adaptive Scientists and the warm start (``model:artifacts/default-model`` or the
agent named by ``--warm-start``; taken from any report that has it): its mean reward with the 95% interval, whether
the intervals are apart, and the share of the gap between the best of those baselines and the all-skills scripted
Scientist it closes.  Last, the mean and spread of that share over the seeds, and each skill's use rate.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

ALL_SKILLS = "scripted:reader+defender+asker"
BASELINES = ("scripted:naive", "scripted:adaptive")


def load(path: str) -> dict:
    p = Path(path)
    return json.loads((p / "report.json" if p.is_dir() else p).read_text())


def _versus(a: dict, b: dict) -> str:
    """``above`` or ``below`` when the 95% intervals of ``a`` and ``b`` are apart, else ``overlap``."""
    if a["ci95"][0] > b["ci95"][1]:
        return "above"
    return "below" if a["ci95"][1] < b["ci95"][0] else "overlap"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="+")
    parser.add_argument("--trained-prefix", default="model:runs/")
    parser.add_argument("--warm-start", default="model:artifacts/default-model")
    args = parser.parse_args()
    reports = [(r, load(r)) for r in args.reports]
    warm = next((rep["agents"][args.warm_start]["overall"] for _, rep in reports if args.warm_start in rep["agents"]),
                None)
    shares = []
    print("| report | trained | " + " | ".join(BASELINES) + " | warm start | all skills | against naive / adaptive / warm "
          "start | share of the gap closed | skill use read / defend / ask |")
    print("|---" * 9 + "|")
    for name, rep in reports:
        agents = rep["agents"]
        trained_spec = next(s for s in agents if s.startswith(args.trained_prefix))
        trained = agents[trained_spec]["overall"]
        others = [agents[b]["overall"] for b in BASELINES] + ([warm] if warm else [])
        apart = " / ".join(_versus(trained, o) for o in others)
        best = max(o["mean_reward"] for o in others)
        top = agents[ALL_SKILLS]["overall"]["mean_reward"]
        share = (trained["mean_reward"] - best) / (top - best)
        shares.append(share)
        use = trained.get("skill_use", {})

        def cell(o: dict) -> str:
            return f"{o['mean_reward']:.2f} [{o['ci95'][0]:.2f}, {o['ci95'][1]:.2f}]"

        print(f"| {name} | {cell(trained)} | " + " | ".join(cell(agents[b]["overall"]) for b in BASELINES)
              + f" | {cell(warm) if warm else '-'} | {top:.2f} | {apart} | {share:+.3f} | "
              + " / ".join(f"{use[s]['use_rate']:.2f}" for s in ("read", "defend", "ask") if s in use) + " |")
    spread = statistics.stdev(shares) if len(shares) > 1 else 0.0
    print(f"\nshare of the gap closed over {len(shares)} seeds: mean {statistics.fmean(shares):+.3f}, "
          f"sd {spread:.3f}, min {min(shares):+.3f}, max {max(shares):+.3f}")
    if warm and "skill_use" in warm:
        print("warm start skill use: " + ", ".join(f"{s} {v['use_rate']:.2f} ({v['chances']})"
                                                  for s, v in warm["skill_use"].items()))


if __name__ == "__main__":
    main()
