"""Did training learn? The trained default against its baselines over several training seeds.

    python benchmarks/learning_claim.py REPORT_DIR_OR_JSON... [--trained-prefix model:runs/]

Each argument is one training seed's ``replicalab eval`` report (``report.json``, or the directory holding it), all
on the same test seeds.  For each, the trained agent (the first agent whose spec starts with ``--trained-prefix``)
is compared with the naive Scientist, the reader (``scripted:reader``) and the warm start
(``model:artifacts/default-model`` or the agent named by ``--warm-start``; taken from any report that has it): its
mean reward with the 95% interval, whether the intervals are apart, and the share of the gap between the best of
those baselines and the all-skills scripted Scientist it closes.  The claim holds for a seed when the trained
agent's interval lies above each of those baselines' intervals.  Last, on how many seeds it holds, the mean and
spread of that share over the seeds, and each skill's use rate.  ``configs/eval/default.yaml`` plays every agent
this needs.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

ALL_SKILLS = "scripted:reader+defender+asker"
#: The scripted baselines the trained agent must beat (the warm start is the third).
BASELINES = ("scripted:naive", "scripted:reader")
AGAINST = " / ".join(b.removeprefix("scripted:") for b in BASELINES) + " / warm start"


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
    shares, held = [], 0
    print("| report | trained | " + " | ".join(BASELINES) + f" | warm start | all skills | against {AGAINST} "
          "| share of the gap closed | skill use read / defend / ask |")
    print("|---" * 9 + "|")
    for name, rep in reports:
        agents = rep["agents"]
        missing = [b for b in (*BASELINES, ALL_SKILLS) if b not in agents]
        if missing:
            raise SystemExit(f"{name}: no {', '.join(missing)} in this report (configs/eval/default.yaml plays them)")
        trained_spec = next(s for s in agents if s.startswith(args.trained_prefix))
        trained = agents[trained_spec]["overall"]
        others = [agents[b]["overall"] for b in BASELINES] + ([warm] if warm else [])
        versus = [_versus(trained, o) for o in others]
        held += warm is not None and all(v == "above" for v in versus)
        apart = " / ".join(versus)
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
    print(f"\nabove {AGAINST} with 95% intervals apart on {held} of {len(shares)} seeds"
          + ("" if warm else f" (no report has the warm start {args.warm_start})"))
    print(f"share of the gap closed over {len(shares)} seeds: mean {statistics.fmean(shares):+.3f}, "
          f"sd {spread:.3f}, min {min(shares):+.3f}, max {max(shares):+.3f}")
    if warm and "skill_use" in warm:
        print("warm start skill use: " + ", ".join(f"{s} {v['use_rate']:.2f} ({v['chances']})"
                                                  for s, v in warm["skill_use"].items()))


if __name__ == "__main__":
    main()
