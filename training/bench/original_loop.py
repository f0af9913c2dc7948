"""The original ReplicaLab's episode loop, timed (the baseline of ``replicalab bench env --original DIR``).

The original project (maxxie114/replicalab-ai) names its package ``replicalab`` too, so its loop runs in a
process of its own whose path holds only its checkout (and its extra dependencies)::

    PYTHONPATH=DIR[:DEPS] python -P training/bench/original_loop.py --episodes N

It plays the loop the original's server runs: ``server.app._make_env()`` (a fresh environment per episode,
as its ``/reset`` makes one; the public repository has no ``replicalab/env/``, so that is the server's stub
environment, with its deterministic Lab Manager inside ``step``) driven by its scripted
``build_baseline_scientist_action``, on every scenario family x difficulty; no LLM, no HTTP, and not the
EpisodeLog the server writes at the end (so the baseline is its fastest loop).  It prints one JSON line,
``{"episodes_per_s": ..., "replicalab": <the package it imported>}``; when the original cannot be imported it
prints one line on stderr and exits 2.

This file is run as a script, never imported: it imports nothing of this project (the original's modules are
imported by name, at run time).
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys
import time
from typing import Callable, Iterator

DIFFICULTIES = ("easy", "medium", "hard")
WARMUP = 200
EXIT_CANNOT_IMPORT = 2


def load_original() -> tuple[Callable, Callable, list[str], str]:
    """The original's environment factory, baseline Scientist, scenario families and package path."""
    os.environ.pop("REPLICALAB_ORACLE_ENABLED", None)  # its judge's verdict: a fixed string, no LLM
    app = importlib.import_module("server.app")  # needs fastapi and starlette on the path
    agents = importlib.import_module("replicalab.agents")
    scenarios = importlib.import_module("replicalab.scenarios")
    logging.getLogger("replicalab.server").setLevel(logging.WARNING)  # its INFO line at every reset
    families = [f["family"] if isinstance(f, dict) else f for f in scenarios.available_scenario_families()]
    package = os.path.dirname(importlib.import_module("replicalab").__file__ or "")
    return app._make_env, agents.build_baseline_scientist_action, families, package


def cells(n: int, templates: list[str]) -> Iterator[tuple[int, str, str]]:
    """``n`` (seed, family, difficulty) cells, every family x difficulty in turn (as ``bench env`` plays ours)."""
    for i in range(n):
        yield i, templates[i % len(templates)], DIFFICULTIES[(i // len(templates)) % len(DIFFICULTIES)]


def play(make_env: Callable, scientist: Callable, seed: int, template: str, difficulty: str) -> int:
    """One episode of the original's loop; the number of steps it took."""
    env = make_env()
    obs = env.reset(seed=seed, scenario=template, difficulty=difficulty)
    steps = 0
    while True:
        result = env.step(scientist(obs.scientist))
        steps += 1
        if result.done:
            return steps
        obs = result.observation


def rate(make_env: Callable, scientist: Callable, templates: list[str], episodes: int) -> float:
    """Episodes per second over ``episodes`` episodes, after ``min(episodes, WARMUP)`` untimed ones."""
    for i, t, d in cells(min(episodes, WARMUP), templates):
        play(make_env, scientist, i, t, d)
    start = time.perf_counter()
    for i, t, d in cells(episodes, templates):
        play(make_env, scientist, i, t, d)
    return episodes / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=2000, help="timed episodes (default %(default)s)")
    args = parser.parse_args(argv)
    try:
        make_env, scientist, templates, package = load_original()
    except Exception as exc:  # noqa: BLE001 -- any failure to import the original is one line for the caller
        print(f"cannot import the original ReplicaLab: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_CANNOT_IMPORT
    print(json.dumps({"episodes_per_s": rate(make_env, scientist, templates, args.episodes), "replicalab": package}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
