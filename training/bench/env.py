"""``replicalab bench env``: complete episodes per second on one core.

Measures, in one run, the full episode (scenario generation, the all-skills Scientist vs the scripted
Lab Manager: every skill's trigger read from the brief and the dialogue, questions answered, counters and
revisions judged, and the EpisodeLog) next to its parts as baselines: scenario generation alone and the
naive Scientist's shorter episodes.  With ``--original DIR`` it also measures the original
project's loop (maxxie114/replicalab-ai, a checkout at DIR; ``training.bench.original_loop``) in a
subprocess, interleaved with the full episode (ours, original, ours, original, ...), and prints the median
of each and our ratio to it.  This is an edge tool: it reads the clock, the game does not.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from replicalab.agents import SKILL_SCIENTISTS, SKILLS, NaiveScientist, skills_name
from replicalab.env import ReplicaLabEnv
from replicalab.episode import run_episode
from replicalab.scenarios import DIFFICULTIES, TEMPLATES, generate_scenario
from training.argtypes import positive_int
from training.errors import UserInputError

DEFAULT_EPISODES = 5000
WARMUP = 200
TARGET_EPISODES_PER_S = 2000.0
#: Measurements of each, ours and the original's loop interleaved, with ``--original`` (the median is shown).
DEFAULT_ROUNDS = 3
ORIGINAL_REPO = "maxxie114/replicalab-ai"
#: The script that times the original's loop in its own process (its package is also named ``replicalab``).
ORIGINAL_DRIVER = Path(__file__).with_name("original_loop.py")
#: The Scientist of the full episode: every skill, so the episode exercises the most of the env.
FULL_SCIENTIST = skills_name(SKILLS)
FULL = f"episode, {FULL_SCIENTIST} scientist"


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


def _full_rate(env: ReplicaLabEnv, episodes: int) -> float:
    make = SKILL_SCIENTISTS[FULL_SCIENTIST]
    return _rate(lambda i, t, d: run_episode(env, make(i, t, d), seed=i, template=t, difficulty=d), episodes)


def bench_env(episodes: int = DEFAULT_EPISODES) -> dict[str, float]:
    env = ReplicaLabEnv()
    rates = {
        "scenario generation only": _rate(lambda i, t, d: generate_scenario(i, t, d), episodes),
        "episode, naive scientist": _rate(
            lambda i, t, d: run_episode(env, NaiveScientist(), seed=i, template=t, difficulty=d), episodes),
        FULL: _full_rate(env, episodes),
    }
    return rates


def _checked_dir(path: Path, option: str) -> Path:
    """``path`` resolved, or a one-line error naming ``option`` when it is not a directory."""
    if not path.is_dir():
        raise UserInputError(f"{option} {path}: no such directory")
    return path.resolve()


def original_rate(checkout: Path, deps: Path | None, episodes: int) -> float:
    """Episodes/s of the original's loop from the checkout at ``checkout`` (``deps``: a folder of its extra
    dependencies, or None), timed by ``ORIGINAL_DRIVER`` in a subprocess whose path holds only those."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(str(p) for p in (checkout, deps) if p is not None))
    run = subprocess.run([sys.executable, "-P", str(ORIGINAL_DRIVER), "--episodes", str(episodes)],
                         env=env, cwd=checkout, capture_output=True, text=True)
    try:
        result = json.loads(run.stdout.strip().splitlines()[-1]) if run.returncode == 0 else None
    except (IndexError, ValueError):
        result = None
    if not isinstance(result, dict):
        why = (run.stderr.strip().splitlines() or [f"exit status {run.returncode}, no result"])[-1]
        raise UserInputError(f"cannot run the original ReplicaLab loop from {checkout}: {why}")
    if Path(result["replicalab"]).resolve().parent != checkout:
        raise UserInputError(f"{checkout} has no replicalab package of its own (the original's loop imported "
                             f"{result['replicalab']})")
    return float(result["episodes_per_s"])


def bench_against_original(rates: dict[str, float], checkout: Path, deps: Path | None, episodes: int,
                           rounds: int) -> tuple[list[float], list[float]]:
    """Our full episode's rate (its first measurement: ``rates``, from ``bench_env``) and the original loop's,
    ``rounds`` of each, interleaved: ours, original, ours, original, ..."""
    env, ours, theirs = ReplicaLabEnv(), [rates[FULL]], []
    for k in range(rounds):
        theirs.append(original_rate(checkout, deps, episodes))
        if k + 1 < rounds:
            ours.append(_full_rate(env, episodes))
    return ours, theirs


def print_bench_env(episodes: int, original: Path | None = None, original_deps: Path | None = None,
                    rounds: int = DEFAULT_ROUNDS) -> int:
    if original is not None:
        original = _checked_dir(original, "--original")
        original_deps = _checked_dir(original_deps, "--original-deps") if original_deps is not None else None
        original_rate(original, original_deps, 1)  # fail fast, in one line, when the original cannot run
    rates = bench_env(episodes)
    if original is not None:
        ours, theirs = bench_against_original(rates, original, original_deps, episodes, rounds)
        rates[FULL] = statistics.median(ours)
    print(f"replicalab bench env: {episodes} episodes per measurement, one process, all templates x difficulties")
    width = max(map(len, rates))
    for name, rate in rates.items():
        print(f"  {name:<{width}} {rate:10.0f} /s")
    main = rates[FULL]
    verdict = "meets" if main >= TARGET_EPISODES_PER_S else "MISSES"
    print(f"  full episodes {verdict} the target of {TARGET_EPISODES_PER_S:.0f}/s "
          f"({main / TARGET_EPISODES_PER_S:.2f}x); generation is "
          f"{100 * main / rates['scenario generation only']:.0f}% of an episode's time")
    if original is not None:
        baseline = statistics.median(theirs)
        print(f"  original ReplicaLab loop ({ORIGINAL_REPO}, {original})  {baseline:.0f} /s")
        print(f"  full episodes / original loop: {main / baseline:.2f}x")
        print(f"  (medians of {rounds} interleaved runs, in a subprocess for the original's: ours "
              f"{', '.join(f'{r:.0f}' for r in ours)}; original {', '.join(f'{r:.0f}' for r in theirs)})")
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--episodes", type=positive_int, default=DEFAULT_EPISODES,
                        help="episodes per measurement (default %(default)s)")
    parser.add_argument("--original", type=Path, default=None, metavar="DIR",
                        help=f"also time the original project's loop ({ORIGINAL_REPO}) from a checkout at DIR, "
                             "in a subprocess, interleaved with the full episodes")
    parser.add_argument("--original-deps", type=Path, default=None, metavar="DIR",
                        help="a folder of the original's extra dependencies (fastapi, starlette), put on its path")
    parser.add_argument("--rounds", type=positive_int, default=DEFAULT_ROUNDS,
                        help="interleaved measurements of each with --original; the median is shown "
                             "(default %(default)s)")


def run(args: argparse.Namespace) -> int:
    return print_bench_env(args.episodes, args.original, args.original_deps, args.rounds)
