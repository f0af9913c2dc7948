"""Batched generation across N episodes vs one episode at a time, with the default model.

    python benchmarks/bench_generate.py [--episodes 18] [--role scientist] [--model DIR]

Both ways play the same held-out jobs with greedy decoding and the same append-only chats: one at a
time is ``ModelAgent`` inside ``run_episode``; batched is ``training.rollout.play.play_jobs`` (one
``generate`` call per step for all episodes).  Prints episodes/s both ways and the speedup ratio.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Optional, Sequence

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from replicalab import HELDOUT_SEEDS, ReplicaLabEnv, run_episode  # noqa: E402
from replicalab.agents import AdaptiveScientist  # noqa: E402
from replicalab.scenarios import cells  # noqa: E402
from training.eval.seat_check import SEATS  # noqa: E402
from training.model.default import resolve_default_model  # noqa: E402
from training.rollout.agent import ModelAgent, greedy_for  # noqa: E402
from training.rollout.play import play_jobs  # noqa: E402
from training.rollout.policy import PolicyModel  # noqa: E402
from training.rollout.records import (
    EpisodeJob,  # noqa: E402
    episode_jobs,  # noqa: E402
)

DEFAULT_EPISODES = 18


def bench(policy: PolicyModel, role: str, jobs: Sequence[EpisodeJob]) -> dict[str, float]:
    """Seconds and episodes/s for sequential and batched play of ``jobs``."""
    sampling = greedy_for(policy)
    started = time.perf_counter()
    for job in jobs:
        agent = ModelAgent(policy, role, sampling)  # type: ignore[arg-type]
        scientist, lab = (agent, None) if role == "scientist" else (AdaptiveScientist(), agent)
        run_episode(ReplicaLabEnv(), scientist, lab, seed=job.seed, template=job.template,
                    difficulty=job.difficulty)
    sequential = time.perf_counter() - started
    scientist_seat, lab_seat = SEATS[role]
    started = time.perf_counter()
    play_jobs(policy, list(jobs), scientist=scientist_seat, lab_manager=lab_seat, sampling=sampling)
    batched = time.perf_counter() - started
    return {
        "episodes": len(jobs),
        "sequential_eps": len(jobs) / sequential,
        "batched_eps": len(jobs) / batched,
        "speedup": sequential / batched,
    }


def main(argv: Optional[Sequence[str]] = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=DEFAULT_EPISODES)
    parser.add_argument("--role", choices=("scientist", "lab_manager"), default="scientist")
    parser.add_argument("--model", default=None, help="checkpoint dir (default: the embedded model)")
    args = parser.parse_args(argv)
    model_dir = args.model or str(resolve_default_model())
    policy = PolicyModel(model_dir)
    seeds = list(HELDOUT_SEEDS)[: max(1, -(-args.episodes // 9))]
    jobs = episode_jobs(cells(), seeds, args.role, limit=args.episodes)
    result = bench(policy, args.role, jobs)
    print(f"model {model_dir} on {policy.device}, role {args.role}, {result['episodes']} episodes")
    print(f"one at a time: {result['sequential_eps']:.2f} episodes/s")
    print(f"batched:       {result['batched_eps']:.2f} episodes/s")
    print(f"speedup:       {result['speedup']:.2f}x")
    return result


if __name__ == "__main__":
    main()
