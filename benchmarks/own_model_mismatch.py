"""Rollout-vs-trainer log-prob mismatch of each stand-in of a user's own model: TRL's own scoring (no position
ids) next to ReplicaLab's (position ids from the attention mask), on the same sampled completions.

    PYTHONPATH=$PWD HF_HUB_OFFLINE=1 python benchmarks/own_model_mismatch.py [--kinds llama qwen gpt2]

The stand-ins are ``tests/standins.py``'s; the chats, the sampling temperature and the scoring helpers are those of
``tests/training/model/test_own_model.py`` (which asserts the fix), so run it from the repository root.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from tests.standins import BUILDERS
from tests.training.model.test_own_model import CHATS, TEMPERATURE, _policy, _trainer, trainer_logprobs
from training.config.model import SamplingConfig


def mismatch_lines(kind: str, work: Path) -> list[str]:
    """One line per scoring (TRL as is, with position ids): mean and max |trainer - rollout| log-prob and the k3 KL
    estimate over every sampled token of ``CHATS``."""
    import torch

    (work / "model").mkdir()
    path = BUILDERS[kind](work / "model")
    policy = _policy(path)
    gens = policy.generate(CHATS, SamplingConfig(temperature=TEMPERATURE, max_new_tokens=24, seed=3))
    trainer = _trainer(path, work, policy.tokenizer)
    lines = []
    for fixed in (False, True):
        got = trainer_logprobs(trainer, gens, policy.pad_token_id, position_ids=fixed)
        d = torch.cat([g - torch.tensor(x.logprobs) for g, x in zip(got, gens)])
        lines.append(f"{kind:5} {'position ids' if fixed else 'TRL as is  '}: mean |diff| {d.abs().mean():.3g}  "
                     f"max {d.abs().max():.3g}  k3 KL {(torch.exp(d) - 1 - d).mean():.3g}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", nargs="+", choices=list(BUILDERS), default=list(BUILDERS),
                        help="stand-ins to measure (default: all)")
    for kind in parser.parse_args().kinds:
        with tempfile.TemporaryDirectory(prefix=f"mismatch-{kind}-") as work:
            print("\n".join(mismatch_lines(kind, Path(work))), flush=True)


if __name__ == "__main__":
    main()
