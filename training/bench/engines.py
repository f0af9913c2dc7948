"""``replicalab bench engines``: the rollout engines (``rollout.engine``) on the same jobs.

    replicalab bench engines [--episodes 32] [--max-new-tokens 96] [--model DIR] [--workers 1] [--engines hf vllm]

Each engine plays the same jobs (Scientist seat = the policy, scripted Lab Manager) on ``--workers`` Ray
rollout workers, sampling at temperature 1.0 with the same seed; start-up and one warm-up collect are
not timed, then the best of ``--repeats`` collects is.  Printed per engine: episodes/s, model tokens/s
(the engines sample different tokens, so tokens/s is the comparable rate) and the rollout-vs-trainer
log-prob mismatch: every model token of every trajectory scored again by the transformers model in this
process at the sampling temperature (what the trainer does), mean and max |difference| in nats.
``hf`` is the baseline, measured in the same run.  The vLLM engine runs in the vLLM environment
(``launch/setup_vllm.sh``).
"""

from __future__ import annotations

import argparse
import time
from typing import Any, Optional, Sequence

from training.argtypes import positive_int
from training.config.kinds import ENGINES

DEFAULT_EPISODES = 32
DEFAULT_MAX_NEW_TOKENS = 96
DEFAULT_MAX_ROUNDS = 6
DEFAULT_REPEATS = 2
WARMUP_EPISODES = 4
WARMUP_SEED_OFFSET = 10_000
TEMPERATURE = 1.0
SAMPLING_SEED = 7


def mismatch(records: Sequence[Any], model: Any, temperature: float) -> tuple[float, float, int]:
    """Mean and max |trainer - rollout| log-prob over the model tokens of ``records``' trajectories,
    scored by ``model`` (logits / temperature), and the number of tokens."""
    import torch

    total, worst, count = 0.0, 0.0, 0
    for record in records:
        t = record.trajectory
        ids = torch.tensor([t.prompt_ids + t.completion_ids])
        with torch.no_grad():
            logits = model(ids).logits[0, len(t.prompt_ids) - 1:-1].float() / temperature
        scored = torch.log_softmax(logits, -1).gather(1, torch.tensor(t.completion_ids)[:, None])[:, 0]
        mask = torch.tensor(t.env_mask, dtype=torch.bool)
        diff = (scored - torch.tensor(t.logprobs, dtype=torch.float32))[mask].abs()
        if diff.numel():
            total += float(diff.sum())
            worst = max(worst, float(diff.max()))
            count += int(diff.numel())
    return total / max(count, 1), worst, count


def _engine_row(engine: str, model_dir: str, jobs: Sequence[Any], warmup: Sequence[Any], args: argparse.Namespace,
                scorer: Any) -> dict[str, Any]:
    from training.bench.rollout import model_tokens
    from training.config.model import SamplingConfig, VLLMConfig
    from training.rollout.contract import RolloutSpec
    from training.rollout.engines import worker_python
    from training.rollout.ray_backend import RayBackend, RayPool

    sampling = SamplingConfig(temperature=TEMPERATURE, max_new_tokens=args.max_new_tokens, seed=SAMPLING_SEED)
    python, label = worker_python(engine, VLLMConfig())
    tick = time.perf_counter()
    spec = RolloutSpec(model=model_dir, scientist="policy", lab_manager="scripted", sampling=sampling,
                       max_rounds=args.max_rounds, engine=engine)
    backend = RayBackend(spec, RayPool(num_workers=args.workers, python=python))
    try:
        start_s = time.perf_counter() - tick
        backend.collect(warmup, sampling_seed=SAMPLING_SEED)
        best, records = float("inf"), []
        for _ in range(args.repeats):
            tick = time.perf_counter()
            got = backend.collect(jobs, sampling_seed=SAMPLING_SEED)
            seconds = time.perf_counter() - tick
            if seconds < best:
                best, records = seconds, got
    finally:
        backend.close()
    mean_diff, max_diff, scored = mismatch(records, scorer, TEMPERATURE)
    tokens = model_tokens(records)
    return {"engine": label, "start_s": start_s, "seconds": best,
            "episodes_per_s": len(records) / best, "tokens_per_s": tokens / best, "tokens": tokens,
            "mean_reward": sum(r.trajectory.reward for r in records) / len(records),
            "mismatch_mean": mean_diff, "mismatch_max": max_diff, "scored_tokens": scored}


def run_bench_engines(args: argparse.Namespace) -> list[dict[str, Any]]:
    from transformers import AutoModelForCausalLM

    from training.bench.rollout import bench_jobs
    from training.model.default import resolve_default_model

    model_dir = str(args.model or resolve_default_model())
    jobs = bench_jobs(args.episodes)
    warmup = bench_jobs(WARMUP_EPISODES, seed_offset=WARMUP_SEED_OFFSET)
    scorer = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    return [_engine_row(engine, model_dir, jobs, warmup, args, scorer) for engine in args.engines]


def format_bench_engines(rows: Sequence[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = [f"rollout engines: {args.episodes} episodes, {args.workers} Ray worker(s), temperature {TEMPERATURE}, "
             f"max {args.max_new_tokens} new tokens a turn (best of {args.repeats})",
             f"{'engine':<14}{'start s':>9}{'time s':>9}{'episodes/s':>12}{'tokens/s':>10}{'tokens':>8}"
             f"{'reward':>8}{'mismatch mean':>15}{'max':>10}"]
    base = rows[0]["tokens_per_s"] if rows else 0.0
    for r in rows:
        lines.append(f"{r['engine']:<14}{r['start_s']:>9.1f}{r['seconds']:>9.2f}{r['episodes_per_s']:>12.2f}"
                     f"{r['tokens_per_s']:>10.0f}{r['tokens']:>8}{r['mean_reward']:>8.2f}"
                     f"{r['mismatch_mean']:>15.2e}{r['mismatch_max']:>10.2e}")
    if len(rows) > 1 and base:
        lines.append("tokens/s vs " + rows[0]["engine"] + ": "
                     + ", ".join(f"{r['engine']} {r['tokens_per_s'] / base:.2f}x" for r in rows[1:]))
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=None, help="checkpoint dir (default: the embedded model)")
    parser.add_argument("--episodes", type=positive_int, default=DEFAULT_EPISODES, help="episodes per engine")
    parser.add_argument("--max-new-tokens", type=positive_int, default=DEFAULT_MAX_NEW_TOKENS,
                        help="new tokens per model turn")
    parser.add_argument("--max-rounds", type=positive_int, default=DEFAULT_MAX_ROUNDS, help="rounds per episode")
    parser.add_argument("--workers", type=positive_int, default=1, help="Ray rollout workers per engine")
    parser.add_argument("--repeats", type=positive_int, default=DEFAULT_REPEATS, help="timed collects (best kept)")
    parser.add_argument("--engines", nargs="+", choices=ENGINES, default=list(ENGINES),
                        help="engines to compare; the first is the baseline")


def run(args: argparse.Namespace) -> int:
    print(format_bench_engines(run_bench_engines(args), args))
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="replicalab bench engines", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
