"""A fingerprint of the game: SHA-256 over the EpisodeLogs of every scripted Scientist against the scripted
Lab Manager, on every template x difficulty cell.  Equal before and after a change = the game's behaviour
did not change.

    python benchmarks/episode_fingerprint.py --episodes 20
"""

from __future__ import annotations

import argparse
import hashlib

from replicalab import DIFFICULTIES, TEMPLATES, VALIDATION_SEEDS, ReplicaLabEnv, run_episode
from replicalab.agents import SCIENTIST_FACTORIES


def fingerprint(episodes: int) -> tuple[str, int]:
    """The hex digest over ``episodes`` validation seeds per (Scientist, cell), and the number of logs."""
    digest, count = hashlib.sha256(), 0
    env = ReplicaLabEnv()
    for name, make in SCIENTIST_FACTORIES.items():
        for template in TEMPLATES:
            for difficulty in DIFFICULTIES:
                for seed in VALIDATION_SEEDS[:episodes]:
                    log = run_episode(env, make(seed, template, difficulty), seed=seed, template=template,
                                      difficulty=difficulty)
                    digest.update(log.model_dump_json().encode())
                    count += 1
    return digest.hexdigest(), count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=20, help="validation seeds per Scientist and cell")
    digest, count = fingerprint(parser.parse_args().episodes)
    print(f"{count} EpisodeLogs, sha256 {digest}")


if __name__ == "__main__":
    main()
