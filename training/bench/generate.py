"""``replicalab bench generate``: how fast ``PolicyModel`` decodes a batch, against its device's bandwidth limit.

    replicalab bench generate [--model DIR|default|shape:0.5b ...] [--batch 32] [--prompt-tokens 256]
                              [--new-tokens 64] [--episodes 0] [--role scientist]

``--model`` takes several models, each decoded in turn in the same run: a checkpoint directory, ``default`` (the
embedded model) or ``shape:NAME``, a random bfloat16 Qwen2 model of a named shape (``training.bench.sync.SHAPES``:
``0.5b`` is Qwen2.5-0.5B's) built in a temporary folder, so a large model's decoding is measured with no download.

Decoding: ``--batch`` prompts of ``--prompt-tokens`` token ids (drawn from the vocabulary, seeded) sampled at 1.0
for up to ``--new-tokens``, once with the dynamic KV cache (the baseline) and once with the static one
(``sampling.kv_cache``; compiled decoding on a GPU), each row sampled from a generator of its own as in rollouts,
then once more with the static cache and one shared generator (what the per-row draws cost); each timed after a
warm-up call of the same shape.  Per line:
tokens/s, decoding steps/s, the bytes a step reads (weights and the KV cache so far) and the share of the
device's measured copy bandwidth those steps use (``training.bench.decode``).

With ``--profile``: one static-cache call per model under ``torch.profiler`` (the operators that took the most
device time: where a decoding step's time goes).

With ``--episodes N``: also the same validation jobs played two ways with greedy decoding and the same
append-only chats: one at a time (the baseline, ``ModelAgent`` inside ``run_episode``) and batched
(``training.rollout.play.play_jobs``, one ``generate`` call per step for all episodes); episodes/s both ways and
the speedup.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import TYPE_CHECKING, Optional, Sequence

from replicalab.seats import ROLES
from training.argtypes import int_at_least, positive_int

if TYPE_CHECKING:
    from training.rollout.policy import PolicyModel
    from training.rollout.records import EpisodeJob

#: Decoding defaults: a batch of 32 prompts of 256 tokens, up to 64 new tokens each.
DEFAULT_BATCH, DEFAULT_PROMPT_TOKENS, DEFAULT_NEW_TOKENS = 32, 256, 64
KV_CACHES = ("dynamic", "static")
#: The rows of one model: (KV cache, per-row generators?).  Rollouts draw each row from a generator of its own
#: (``RowSampler``); the last row draws from one shared generator, which shows what the per-row draws cost.
ROWS = (("dynamic", True), ("static", True), ("static", False))
#: ``--model shape:NAME``: a random model of a named shape.
SHAPE_PREFIX = "shape:"


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
    parser.add_argument("--batch", type=positive_int, default=DEFAULT_BATCH, help="prompts decoded together")
    parser.add_argument("--prompt-tokens", type=positive_int, default=DEFAULT_PROMPT_TOKENS, help="tokens per prompt")
    parser.add_argument("--new-tokens", type=positive_int, default=DEFAULT_NEW_TOKENS, help="tokens per reply, at most")
    parser.add_argument("--episodes", type=int_at_least(0), default=0,
                        help="also play this many validation episodes one at a time and batched (default 0: not)")
    parser.add_argument("--role", choices=ROLES, default="scientist", help="the seat the model plays")
    parser.add_argument("--profile", action="store_true",
                        help="also profile one static-cache call per model (torch.profiler: the operators that took "
                             "the most device time, host time on CPU)")
    parser.add_argument("--model", nargs="+", default=["default"], type=_model_arg,
                        help="models decoded in turn: checkpoint dirs, 'default' (the embedded model) or shape:NAME, "
                             "a random bfloat16 model of a named shape (" + ", ".join(_shape_names()) + ")")


def _shape_names() -> list[str]:
    from training.bench.sync import SHAPES

    return [SHAPE_PREFIX + name for name in sorted(SHAPES)]


def _model_arg(value: str) -> str:
    """``--model``'s words: a shape must be a known one (anything else is checked when it loads)."""
    if value.startswith(SHAPE_PREFIX) and value not in _shape_names():
        raise argparse.ArgumentTypeError(f"unknown shape {value!r}; known: {', '.join(_shape_names())}")
    return value


def run(args: argparse.Namespace) -> int:
    """Decode ``args.batch`` prompts with each model and KV cache (and play ``args.episodes`` episodes both ways
    with the first model) and print the rates."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import tempfile

    print(f"batch {args.batch}, {args.prompt_tokens} prompt tokens, up to {args.new_tokens} new tokens, "
          f"sampled at 1.0")
    bandwidth = None  # measured once, on the first model's device
    for index, model in enumerate(args.model):
        with tempfile.TemporaryDirectory() as tmp:
            policy = _load(model, tmp)
            bandwidth = bandwidth or _print_header(policy.device)
            _decode(policy, model, bandwidth, args.batch, args.prompt_tokens, args.new_tokens)
            if args.profile:
                _profile(policy, model, args.batch, args.prompt_tokens, args.new_tokens)
            if args.episodes and index == 0:
                _episodes(policy, args.role, args.episodes)
            del policy
    return 0


def _load(model: str, tmp: str) -> PolicyModel:
    """The ``PolicyModel`` of one ``--model`` word (a ``shape:NAME`` is built in ``tmp`` first)."""
    from pathlib import Path

    from training.model.default import resolve_default_model
    from training.model.model_path import check_model_path
    from training.rollout.policy import PolicyModel

    if model.startswith(SHAPE_PREFIX):
        from training.bench.sync import build_standin

        build_standin(model.removeprefix(SHAPE_PREFIX), Path(tmp))
        return PolicyModel(tmp)
    return PolicyModel(str(resolve_default_model()) if model == "default" else check_model_path(model))


def _print_header(device: object) -> float:
    """Measure ``device``'s copy bandwidth, print it and the table's header; return it."""
    from training.bench.decode import copy_bandwidth

    bandwidth = copy_bandwidth(device)
    print(f"device {device}: copy bandwidth {bandwidth / 1e9:,.1f} GB/s")
    print(f"{'model':<16}{'KV cache':<10}{'sampler':<9}{'params':>9}{'tokens/s':>12}{'steps/s':>10}"
          f"{'MB read per step':>18}{'GB/s read':>11}{'share of bandwidth':>20}")
    return bandwidth


def _decode(policy: PolicyModel, name: str, bandwidth: float, batch: int, prompt_tokens: int, new_tokens: int) -> None:
    from training.bench.decode import decode_rates
    from training.config.model import SamplingConfig

    prompts = _prompts(policy, batch, prompt_tokens, new_tokens)
    params = sum(p.numel() for p in policy.model.parameters())
    label = name if len(name) < 16 else "..." + name[-12:]
    for cache, per_row in ROWS:
        sampling = SamplingConfig(temperature=1.0, max_new_tokens=new_tokens, kv_cache=cache)
        r = decode_rates(policy, prompts, sampling, row_seeds=per_row)
        sampler = "per-row" if per_row else "shared"
        print(f"{label:<16}{cache:<10}{sampler:<9}{params / 1e6:>8.1f}M{r['tokens_per_s']:>12,.0f}"
              f"{r['steps_per_s']:>10,.1f}{r['bytes_per_step'] / 1e6:>18,.2f}{r['read_bytes_per_s'] / 1e9:>11.3g}"
              f"{r['read_bytes_per_s'] / bandwidth:>20.3g}", flush=True)


def _prompts(policy: PolicyModel, batch: int, prompt_tokens: int, new_tokens: int) -> list[list[int]]:
    """``batch`` prompts of ``prompt_tokens`` ids drawn from the vocabulary (seeded; no special tokens), cut to fit."""
    import random

    from training.config.model import SamplingConfig

    special = set(policy.tokenizer.all_special_ids)
    vocab = [t for t in range(len(policy.tokenizer)) if t not in special]
    rng = random.Random(0)
    budget = policy.prompt_budget(SamplingConfig(max_new_tokens=new_tokens))
    return [[rng.choice(vocab) for _ in range(min(prompt_tokens, budget))] for _ in range(batch)]


def _profile(policy: PolicyModel, name: str, batch: int, prompt_tokens: int, new_tokens: int) -> None:
    from training.bench.decode import profile_decode
    from training.config.model import SamplingConfig

    sampling = SamplingConfig(temperature=1.0, max_new_tokens=new_tokens, kv_cache="static")
    print(f"{name}, static KV cache, per-row streams: " + profile_decode(
        policy, _prompts(policy, batch, prompt_tokens, new_tokens), sampling), flush=True)


def _episodes(policy: PolicyModel, role: str, episodes: int) -> None:
    from replicalab import VALIDATION_SEEDS
    from replicalab.scenarios import cells
    from training.rollout.records import episode_jobs

    grid = cells()
    seeds = list(VALIDATION_SEEDS)[: -(-episodes // len(grid))]
    jobs = episode_jobs(grid, seeds, role, limit=episodes)
    result = bench(policy, role, jobs)
    print(f"role {role}, {result['episodes']} episodes")
    print(f"one at a time: {result['sequential_eps']:.2f} episodes/s")
    print(f"batched:       {result['batched_eps']:.2f} episodes/s")
    print(f"speedup:       {result['speedup']:.2f}x")


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m training.bench.generate``: the same as ``replicalab bench generate``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
