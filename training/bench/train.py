"""``replicalab bench train``: where a training step's time goes.

Runs a short training with the given config (default: the default config, a few steps) in a scratch
directory and prints the mean per-step breakdown: weight sync, generation, environment (env, parsing
and Ray overhead) and optimizer (TRL's loss, backward and step), with each as a share of the step.
``--staleness 0 1`` runs it once per ``rollout.max_staleness`` in the same invocation and compares the step
times (at 1 the rollouts of the next step play while the learner trains: the step approaches max(play, learn)).
On CUDA it also prints the planner's memory estimate for the learner's GPU (``replicalab preflight``) next to the
run's peak allocated and reserved memory (``memory/peak_*_gib``): whether the estimate is the upper bound it claims.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Sequence

from training.argtypes import positive_int

DEFAULT_CONFIG = "configs/train/default.yaml"
DEFAULT_STEPS = 4
PARTS = ("time/weight_sync_s", "time/generation_s", "time/environment_s", "time/optimizer_s")
PEAKS = ("memory/peak_allocated_gib", "memory/peak_reserved_gib")
WEIGHT_SYNC_TARGET = 0.05


def run_bench_train(config: str, overrides: Sequence[str] = (), steps: int = DEFAULT_STEPS) -> dict[str, float]:
    from training.config.train import load_train_config
    from training.trainer.run import run_train

    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_train_config(config, [*overrides, f"grpo.max_steps={steps}", f"output_dir={tmp}",
                                         "checkpoint.save_steps=100000", "validation.every_steps=0",
                                         "wandb.mode=disabled"])
        run_train(cfg)
        rows = [json.loads(line) for line in (Path(tmp) / cfg.run_name / "metrics.jsonl").read_text().splitlines()]
    # the first step pays for warm-up (worker start, first forward): report the rest when there is a rest
    per_part = {p: [r[p] for r in rows if p in r] for p in (*PARTS, "time/step_s", "time/play_s")}
    result = {p: statistics.fmean(v[1:] if len(v) > 1 else v) for p, v in per_part.items() if v}
    peaks = {p: max(r[p] for r in rows if p in r) for p in PEAKS if any(p in r for r in rows)}
    if peaks:
        result.update(peaks, **{"memory/estimate_gib": _planned_gib(cfg)})
    return result


def _planned_gib(cfg) -> float:
    """The planner's estimate for the learner's GPU (device 0) of ``cfg`` on this machine's first GPU."""
    import torch

    from training.cluster.preflight import preflight
    from training.cluster.resources import ClusterResources

    total = torch.cuda.get_device_properties(0).total_memory / 2**30
    plan = preflight(cfg, ClusterResources(gpus=1, gpu_memory_gib=total), log=False)
    return sum(load.memory_gib or 0.0 for load in plan.gpu_loads if (load.node, load.gpu) == (0, 0))


def print_bench_train(result: dict[str, float], config: str = DEFAULT_CONFIG, steps: int = DEFAULT_STEPS) -> None:
    total = result.get("time/step_s") or sum(result.get(p, 0.0) for p in PARTS)
    print(f"replicalab bench train: {config}, {steps} steps; mean per training step (after the first)")
    for p in PARTS:
        value = result.get(p, 0.0)
        print(f"  {p.split('/')[1][:-2]:<14} {value:8.3f} s  {100 * value / total:5.1f}%")
    print(f"  {'step':<14} {total:8.3f} s")
    share = result.get("time/weight_sync_s", 0.0) / total
    print(f"  weight sync is {100 * share:.1f}% of the step (target <= {100 * WEIGHT_SYNC_TARGET:.0f}%)")
    if "memory/estimate_gib" in result:
        estimate, reserved = result["memory/estimate_gib"], result["memory/peak_reserved_gib"]
        print(f"  GPU memory: planner estimate {estimate:.2f} GiB; peak allocated "
              f"{result['memory/peak_allocated_gib']:.2f} GiB, peak reserved {reserved:.2f} GiB: the estimate "
              + ("bounds both" if reserved <= estimate else "is EXCEEDED"))


def print_staleness(results: dict[int, dict[str, float]]) -> None:
    """Step time per ``rollout.max_staleness``, each beside the first one's (same run, same machine)."""
    base_staleness, base = next(iter(results.items()))
    print(f"step time by rollout.max_staleness (mean per step after the first; baseline {base_staleness}):")
    for staleness, result in results.items():
        step, play = result.get("time/step_s", 0.0), result.get("time/play_s", 0.0)
        print(f"  staleness {staleness}: step {step:8.3f} s  play {play:8.3f} s  "
              f"{base.get('time/step_s', 0.0) / max(step, 1e-9):5.2f}x the baseline's speed")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default=DEFAULT_CONFIG, help="the train config to time (default %(default)s)")
    parser.add_argument("--steps", type=positive_int, default=DEFAULT_STEPS,
                        help="training steps to run (default %(default)s)")
    parser.add_argument("--staleness", type=int, nargs="+", choices=(0, 1), default=None,
                        help="time each rollout.max_staleness in turn, e.g. --staleness 0 1 (needs rollout.backend=ray)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                        help="TrainConfig overrides, e.g. rollout.num_workers=1")


def run(args: argparse.Namespace) -> int:
    if not args.staleness:
        print_bench_train(run_bench_train(args.config, args.overrides, steps=args.steps), args.config, args.steps)
        return 0
    results = {}
    for staleness in args.staleness:
        results[staleness] = run_bench_train(args.config, [*args.overrides, f"rollout.max_staleness={staleness}"],
                                             steps=args.steps)
        print_bench_train(results[staleness], f"{args.config} rollout.max_staleness={staleness}", args.steps)
    print_staleness(results)
    return 0
