"""Mean reward (and the 10-point core) of the scripted Scientists on test seeds, per cell, against one scripted
Lab Manager (the default one unless ``--lab``).

    python benchmarks/baselines.py --episodes 100 [--lab cooperative]
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
from replicalab.agents import SCIENTIST_FACTORIES
from replicalab.lab import DEFAULT_LAB_POLICY, LAB_POLICIES

#: The Scientists in the table: the baselines, each skill alone and all of them, the ceilings.
AGENTS = ("naive", "reader", "defender", "asker", "reader+defender+asker", "oracle", "random")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--lab", choices=LAB_POLICIES, default=DEFAULT_LAB_POLICY)
    args = parser.parse_args()
    n, lab = args.episodes, args.lab
    env = ReplicaLabEnv()
    print(f"test seeds {TEST_SEEDS.start}..{TEST_SEEDS.start + n - 1}, Lab Manager scripted:{lab}; "
          "cells show mean total (mean core)")
    print("| template | difficulty | " + " | ".join(AGENTS) + " |")
    print("|---|---|" + "---|" * len(AGENTS))
    for t in TEMPLATES:
        for d in DIFFICULTIES:
            cells = []
            for name in AGENTS:
                totals, cores = [], []
                for seed in TEST_SEEDS[:n]:
                    log = run_episode(env, SCIENTIST_FACTORIES[name](seed, t, d), lab, seed=seed, template=t,
                                      difficulty=d)
                    b = log.reward_breakdown
                    totals.append(log.total_reward)
                    cores.append(10 * b.rigor * b.feasibility * b.fidelity)
                cells.append(f"{statistics.mean(totals):.2f} ({statistics.mean(cores):.2f})")
            print(f"| {t} | {d} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
