"""``replicalab bench {env,skills,policy,lab-manager,groups,rollout,train,generate,generate-memory,engines,sync}``: benchmarks that print
their figures next to a baseline measured in the same run.  ``env`` and ``skills`` need only the core install.

Each benchmark is a module here with two functions, ``add_arguments(parser)`` (its own options and
defaults) and ``run(args) -> int`` (measure and print), and no torch import at module level, so the
command line can build every benchmark's parser cheaply.  ``BENCHMARKS`` names them; adding one is a
module plus one line there.
"""

from __future__ import annotations

import argparse
import importlib

#: ``replicalab bench NAME`` -> the module that implements it (see the module docstring).
BENCHMARKS: dict[str, str] = {
    "env": "training.bench.env",  # episodes/s of the game vs its parts
    "skills": "training.bench.skills",  # what each skill of the game is worth (scripted agents)
    "policy": "training.bench.policy",  # a model Scientist's pass@k, skill use and decision probabilities
    "lab-manager": "training.bench.lab_manager",  # a model Lab Manager's parse and true-flag rates, its moves
    "groups": "training.bench.groups",  # how often GRPO groups contrast a decision: whole-episode vs branch
    "rollout": "training.bench.rollout",  # in-process and Ray rollouts vs plain generation
    "train": "training.bench.train",  # where a training step's time goes
    "generate": "training.bench.generate",  # batched vs one-at-a-time generation
    "generate-memory": "training.bench.generate_memory",  # peak memory: logits buffer vs step-by-step logprobs
    "engines": "training.bench.engines",  # rollout engines (hf, vllm) on the same jobs
    "sync": "training.bench.sync",  # weight sync to the rollout workers: collective vs object store
}


def add_bench_parsers(bench: argparse.ArgumentParser) -> None:
    """One sub-parser per benchmark under ``bench``, each with its own options; ``args.func`` runs it."""
    whats = bench.add_subparsers(dest="what", required=True, metavar="{" + ",".join(BENCHMARKS) + "}")
    for name, module_name in BENCHMARKS.items():
        module = importlib.import_module(module_name)
        doc = (module.__doc__ or name).strip()
        summary = doc.splitlines()[0].replace("``", "").removeprefix(f"replicalab bench {name}: ")
        parser = whats.add_parser(name, help=summary, description=doc,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(parser)
        parser.set_defaults(func=module.run)
