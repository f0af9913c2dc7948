"""``replicalab bench env``: complete episodes per second on one core.

Measures, in one run, the full episode (scenario generation, adaptive Scientist vs scripted Lab
Manager, full judging and the EpisodeLog) next to its parts as baselines: scenario generation alone
and the naive Scientist's shorter episodes.  This is an edge tool: it reads the clock, the game does not.
"""

from __future__ import annotations

import argparse
import time
from typing import Callable

from replicalab.agents import AdaptiveScientist, NaiveScientist
from replicalab.env import ReplicaLabEnv
from replicalab.episode import run_episode
from replicalab.scenarios import DIFFICULTIES, TEMPLATES, generate_scenario
from training.argtypes import positive_int

DEFAULT_EPISODES = 5000
WARMUP = 200
TARGET_EPISODES_PER_S = 2000.0


def _cells(n: int):
    for i in range(n):
        yield i, TEMPLATES[i % len(TEMPLATES)], DIFFICULTIES[(i // len(TEMPLATES)) % len(DIFFICULTIES)]


def _rate(fn: Callable[[int, str, str], object], n: int) -> float:
    for i, t, d in _cells(min(n, WARMUP)):
        fn(i, t, d)
    start = time.perf_counter()
    for i, t, d in _cells(n):
        fn(i, t, d)
    return n / (time.perf_counter() - start)


def bench_env(episodes: int = DEFAULT_EPISODES) -> dict[str, float]:
    env = ReplicaLabEnv()
    rates = {
        "scenario generation only": _rate(lambda i, t, d: generate_scenario(i, t, d), episodes),
        "episode, naive scientist": _rate(
            lambda i, t, d: run_episode(env, NaiveScientist(), seed=i, template=t, difficulty=d), episodes),
        "episode, adaptive scientist": _rate(
            lambda i, t, d: run_episode(env, AdaptiveScientist(), seed=i, template=t, difficulty=d), episodes),
    }
    return rates


def print_bench_env(episodes: int) -> int:
    rates = bench_env(episodes)
    print(f"replicalab bench env: {episodes} episodes per measurement, one process, all templates x difficulties")
    for name, rate in rates.items():
        print(f"  {name:<30} {rate:10.0f} /s")
    main = rates["episode, adaptive scientist"]
    verdict = "meets" if main >= TARGET_EPISODES_PER_S else "MISSES"
    print(f"  adaptive episodes {verdict} the target of {TARGET_EPISODES_PER_S:.0f}/s "
          f"({main / TARGET_EPISODES_PER_S:.2f}x); generation is "
          f"{100 * main / rates['scenario generation only']:.0f}% of an episode's time")
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--episodes", type=positive_int, default=DEFAULT_EPISODES,
                        help="episodes per measurement (default %(default)s)")


def run(args: argparse.Namespace) -> int:
    return print_bench_env(args.episodes)
