"""Batched generation across N episodes vs one episode at a time, with the default model.

    python benchmarks/bench_generate.py [--episodes 18] [--role scientist] [--model DIR]

Both ways play the same held-out specs with greedy decoding: one at a time is ``ModelAgent`` inside
``run_episode``; batched is ``run_episodes_batched`` (one ``generate`` call per turn for all
episodes).  Prints episodes/s both ways and the speedup ratio.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Optional, Sequence

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from replicalab import HELDOUT_SEEDS, ReplicaLabEnv, run_episode  # noqa: E402
from replicalab.agents import AdaptiveScientist  # noqa: E402
from training.default_model import resolve_default_model  # noqa: E402
from training.model_agent import GREEDY, EpisodeSpec, ModelAgent, run_episodes_batched  # noqa: E402
from training.model_eval import episode_specs  # noqa: E402
from training.policy import PolicyModel  # noqa: E402

DEFAULT_EPISODES = 18


def bench(policy: PolicyModel, role: str, specs: Sequence[EpisodeSpec]) -> dict[str, float]:
    """Seconds and episodes/s for sequential and batched play of ``specs``."""
    started = time.perf_counter()
    for spec in specs:
        agent = ModelAgent(policy, role, GREEDY)  # type: ignore[arg-type]
        scientist, lab = (agent, None) if role == "scientist" else (AdaptiveScientist(), agent)
        run_episode(ReplicaLabEnv(), scientist, lab, seed=spec.seed, template=spec.template,
                    difficulty=spec.difficulty)
    sequential = time.perf_counter() - started
    started = time.perf_counter()
    run_episodes_batched(policy, role, specs, sampling=GREEDY)  # type: ignore[arg-type]
    batched = time.perf_counter() - started
    return {
        "episodes": len(specs),
        "sequential_eps": len(specs) / sequential,
        "batched_eps": len(specs) / batched,
        "speedup": sequential / batched,
    }


def main(argv: Optional[Sequence[str]] = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=DEFAULT_EPISODES)
    parser.add_argument("--role", choices=("scientist", "lab_manager"), default="scientist")
    parser.add_argument("--model", default=None, help="checkpoint dir (default: the embedded model)")
    args = parser.parse_args(argv)
    model_dir = args.model or str(resolve_default_model())
    policy = PolicyModel(model_dir, sampling=GREEDY)
    seeds = list(HELDOUT_SEEDS)[: max(1, -(-args.episodes // 9))]
    specs = episode_specs(seeds)[: args.episodes]
    result = bench(policy, args.role, specs)
    print(f"model {model_dir} on {policy.device}, role {args.role}, {result['episodes']} episodes")
    print(f"one at a time: {result['sequential_eps']:.2f} episodes/s")
    print(f"batched:       {result['batched_eps']:.2f} episodes/s")
    print(f"speedup:       {result['speedup']:.2f}x")
    return result


if __name__ == "__main__":
    main()
