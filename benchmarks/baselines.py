"""Mean reward (and the 10-point core) of the scripted Scientists on test seeds, per cell.

    python benchmarks/baselines.py --episodes 300
"""

from __future__ import annotations

import argparse
import statistics

from replicalab import (
    DIFFICULTIES,
    TEMPLATES,
    TEST_SEEDS,
    ReplicaLabEnv,
    run_episode,
)
from replicalab.agents import SCIENTIST_FACTORIES as AGENTS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=300)
    n = parser.parse_args().episodes
    env = ReplicaLabEnv()
    print(f"test seeds {TEST_SEEDS.start}..{TEST_SEEDS.start + n - 1}; cells show mean total (mean core)")
    print("| template | difficulty | " + " | ".join(AGENTS) + " |")
    print("|---|---|" + "---|" * len(AGENTS))
    for t in TEMPLATES:
        for d in DIFFICULTIES:
            cells = []
            for make in AGENTS.values():
                totals, cores = [], []
                for seed in TEST_SEEDS[:n]:
                    log = run_episode(env, make(seed, t, d), seed=seed, template=t, difficulty=d)
                    b = log.reward_breakdown
                    totals.append(log.total_reward)
                    cores.append(10 * b.rigor * b.feasibility * b.fidelity)
                cells.append(f"{statistics.mean(totals):.2f} ({statistics.mean(cores):.2f})")
            print(f"| {t} | {d} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
