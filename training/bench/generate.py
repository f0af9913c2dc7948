"""``replicalab bench generate``: batched generation across N episodes vs one episode at a time.

    replicalab bench generate [--episodes 18] [--role scientist] [--model DIR]

Both ways play the same validation jobs with greedy decoding and the same append-only chats: one at a
time (the baseline) is ``ModelAgent`` inside ``run_episode``; batched is ``training.rollout.play.play_jobs``
(one ``generate`` call per step for all episodes).  Prints episodes/s both ways and the speedup ratio.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import TYPE_CHECKING, Optional, Sequence

from replicalab.seats import ROLES
from training.argtypes import positive_int

if TYPE_CHECKING:
    from training.rollout.policy import PolicyModel
    from training.rollout.records import EpisodeJob

DEFAULT_EPISODES = 18


def bench(policy: PolicyModel, role: str, jobs: Sequence[EpisodeJob]) -> dict[str, float]:
    """Seconds and episodes/s for sequential and batched play of ``jobs``."""
    from replicalab import ReplicaLabEnv, run_episode
    from replicalab.seats import parse_seat, scripted_scientist
    from training.eval.seat_check import SEATS
    from training.rollout.agent import ModelAgent, greedy_for
    from training.rollout.play import play_jobs

    sampling = greedy_for(policy)
    scientist_seat, lab_seat = SEATS[role]
    opponent = parse_seat("scientist", SEATS["lab_manager"][0]).arg  # the scripted Scientist of the Lab Manager seat
    started = time.perf_counter()
    for job in jobs:
        agent = ModelAgent(policy, role, sampling)  # type: ignore[arg-type]
        scientist, lab = (agent, None) if role == "scientist" else (
            scripted_scientist(opponent, job.seed, job.template, job.difficulty), agent)
        run_episode(ReplicaLabEnv(), scientist, lab, seed=job.seed, template=job.template,
                    difficulty=job.difficulty)
    sequential = time.perf_counter() - started
    started = time.perf_counter()
    play_jobs(policy, list(jobs), scientist=scientist_seat, lab_manager=lab_seat, sampling=sampling)
    batched = time.perf_counter() - started
    return {
        "episodes": len(jobs),
        "sequential_eps": len(jobs) / sequential,
        "batched_eps": len(jobs) / batched,
        "speedup": sequential / batched,
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--episodes", type=positive_int, default=DEFAULT_EPISODES,
                        help="validation episodes played each way (default %(default)s)")
    parser.add_argument("--role", choices=ROLES, default="scientist", help="the seat the model plays")
    parser.add_argument("--model", default=None, help="checkpoint dir (default: the embedded model)")


def run(args: argparse.Namespace) -> int:
    """Time both ways on ``args.episodes`` validation jobs and print the rates."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from replicalab import VALIDATION_SEEDS
    from replicalab.scenarios import cells
    from training.model.default import resolve_default_model
    from training.rollout.policy import PolicyModel
    from training.rollout.records import episode_jobs

    model_dir = args.model or str(resolve_default_model())
    policy = PolicyModel(model_dir)
    grid = cells()
    seeds = list(VALIDATION_SEEDS)[: -(-args.episodes // len(grid))]
    jobs = episode_jobs(grid, seeds, args.role, limit=args.episodes)
    result = bench(policy, args.role, jobs)
    print(f"model {model_dir} on {policy.device}, role {args.role}, {result['episodes']} episodes")
    print(f"one at a time: {result['sequential_eps']:.2f} episodes/s")
    print(f"batched:       {result['batched_eps']:.2f} episodes/s")
    print(f"speedup:       {result['speedup']:.2f}x")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m training.bench.generate``: the same as ``replicalab bench generate``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
