"""``replicalab bench rollout``: in-process and Ray rollouts against plain batched generation.

    replicalab bench rollout [--episodes 64] [--max-new-tokens 96] [--model DIR] [--ray-workers 1 2]

Every configuration plays the same jobs (Scientist seat = the policy, scripted Lab Manager, greedy
decoding so every run generates the same tokens) with one torch thread per process:

* ``inprocess``  -- ``InProcessBackend`` in this process;
* ``ray x1`` / ``ray x2`` -- ``RayBackend`` with 1 and 2 workers (actor start-up not timed);
* ``bound`` -- the upper bound: the generation calls the in-process rollout made, recorded and
  replayed with the same prompts and batch sizes through ``PolicyModel`` alone (no env, parsing or
  Ray).  ``bound x2`` replays every batch split into two halves, one half in each of two 1-thread
  processes at the same time, and takes the slower: plain generation of the same tokens on the
  machine ``ray x2`` runs on, sharing its cores, caches and memory bandwidth; its runs alternate with
  those of ``ray x2``, so both are timed in the same stretch of the machine's life.  ``bound x2 alone``
  times the two halves one after the other instead (no contention: what two independent machines
  would need), for reference.

``--ray-workers`` with no number times the in-process rows only (no Ray).
Overheads are ``time / bound_time - 1`` (``ray x2`` against ``bound x2``).  "others CPU" is the
share of the machine's CPU that processes other than the bench's used during a timed run: figures
taken beside a busy neighbour (more than a few percent) are not comparable.  Targets (reported, not
asserted): rollout overhead <= 15 %, ``ray x2`` >= 1.6x ``ray x1``.
"""

from __future__ import annotations

import argparse
import copy
import os
import time
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from replicalab import TRAIN_SEEDS  # noqa: E402
from replicalab.scenarios import cells  # noqa: E402
from training.argtypes import positive_int  # noqa: E402
from training.cluster.ray_session import RAY_ENV  # noqa: E402
from training.config.model import SamplingConfig  # noqa: E402
from training.rollout.contract import RolloutSpec  # noqa: E402
from training.rollout.inprocess import InProcessBackend  # noqa: E402
from training.rollout.ray_backend import RayBackend, RayPool  # noqa: E402
from training.rollout.records import EpisodeJob, RolloutRecord, episode_jobs  # noqa: E402

#: 64 keeps the two-worker bound near 2.5 s on 2 cores, so a few hundred ms of Ray scheduling stays a small
#: share of it (at 16 the overhead and scaling figures move by several points between runs).
DEFAULT_EPISODES = 64
DEFAULT_MAX_NEW_TOKENS = 96
DEFAULT_MAX_ROUNDS = 6
#: Jobs played once per backend before timing (first-call costs: allocator, kernels, tokenizer).
WARMUP_EPISODES = 2
#: Every timing is the best of this many runs (the machine may be shared; the minimum is the signal).
DEFAULT_REPEATS = 3
#: Seed offset so the warm-up and timed jobs play different scenarios.
WARMUP_SEED_OFFSET = 10_000
SEATS = dict(scientist="policy", lab_manager="scripted")
#: Policy methods whose calls the bound replays (``play_jobs`` generates through one of them).
GENERATE_METHODS = ("generate", "generate_ids")
TARGET_OVERHEAD_PCT = 15.0
#: Above this share of CPU used by other processes during a timed run, the printout warns.
NOISY_NEIGHBOUR_PCT = 10.0
TARGET_SPEEDUP = 1.6
#: Seconds the two-process bound may take before the bench gives up with an error.
REPLAY_TIMEOUT_S = 600.0


def bench_jobs(episodes: int, seed_offset: int = 0) -> list[EpisodeJob]:
    """``episodes`` Scientist jobs on training seeds, every cell per seed."""
    grid = cells()
    return episode_jobs(grid, TRAIN_SEEDS[seed_offset: seed_offset - (-episodes // len(grid))], limit=episodes)


def model_tokens(records: Sequence[RolloutRecord]) -> int:
    """Tokens the policy generated across ``records`` (env_mask ones)."""
    return sum(sum(r.trajectory.env_mask) for r in records if r.trajectory is not None)


@dataclass
class _Recorder:
    """Wraps a policy's generate methods and keeps every call (method, args, kwargs)."""

    policy: Any
    calls: list[tuple[str, tuple, dict]] = field(default_factory=list)

    def __enter__(self) -> "_Recorder":
        for name in GENERATE_METHODS:
            inner = getattr(self.policy, name, None)
            if inner is not None:
                setattr(self.policy, name, self._wrap(name, inner))
        return self

    def _wrap(self, name: str, inner: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, (copy.deepcopy(args[0]), *args[1:]), kwargs))  # prompts may grow later
            return inner(*args, **kwargs)

        return call

    def __exit__(self, *exc: Any) -> None:
        for name in GENERATE_METHODS:
            self.policy.__dict__.pop(name, None)


def _replay(policy: Any, calls: Sequence[tuple[str, tuple, dict]], part: Optional[int] = None,
            repeats: int = 1) -> tuple[float, int]:
    """Best seconds and generated tokens to replay ``calls``; ``part`` 0/1 replays that half of each batch."""
    runs = [_replay_once(policy, calls, part) for _ in range(repeats)]
    return min(s for s, _ in runs), runs[0][1]


def _replay_once(policy: Any, calls: Sequence[tuple[str, tuple, dict]], part: Optional[int]) -> tuple[float, int]:
    seconds, tokens = 0.0, 0
    for name, args, kwargs in calls:
        batch = list(args[0])
        if part is not None:
            half = (len(batch) + 1) // 2
            batch = batch[:half] if part == 0 else batch[half:]
            if not batch:
                continue
        started = time.perf_counter()
        outputs = getattr(policy, name)(batch, *args[1:], **kwargs)
        seconds += time.perf_counter() - started
        tokens += sum(len(g.completion_ids) for g in outputs)
    return seconds, tokens


def _row(seconds: float, episodes: int, tokens: int, bound_s: Optional[float] = None,
         others_pct: Optional[float] = None) -> dict[str, float]:
    row = dict(seconds=seconds, episodes_per_s=episodes / seconds, tokens_per_s=tokens / seconds, tokens=tokens)
    if bound_s is not None:
        row["overhead_pct"] = 100.0 * (seconds / bound_s - 1.0)
    if others_pct is not None:
        row["others_cpu_pct"] = others_pct
    return row


def _jiffies(pids: Sequence[int]) -> Optional[tuple[int, int, int]]:
    """(machine busy, machine total, busy of ``pids``) in clock ticks from /proc; None off Linux."""
    try:
        with open("/proc/stat") as f:
            vals = [int(x) for x in f.readline().split()[1:9]]
        ours = 0
        for pid in pids:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            ours += int(fields[11]) + int(fields[12])  # utime + stime
    except (OSError, ValueError, IndexError):
        return None
    return sum(vals) - vals[3] - vals[4], sum(vals), ours


def _timed_collect(backend: Any, jobs: Sequence[EpisodeJob], repeats: int, pids: Sequence[int],
                   paired: Optional[ParallelBound] = None) -> tuple[float, Optional[float], list[RolloutRecord], list]:
    """Best-of-``repeats`` seconds of ``backend.collect(jobs)`` after a warm-up, the share of the
    machine's CPU that other processes used meanwhile (percent; a noisy-neighbour flag), the records, and
    the runs of ``paired.once()`` timed just before each collect (so the two see the same machine)."""
    backend.collect(bench_jobs(WARMUP_EPISODES, WARMUP_SEED_OFFSET))
    best, records, paired_runs = float("inf"), [], []
    before = _jiffies(pids)
    for _ in range(repeats):
        if paired is not None:
            paired_runs.append(paired.once())
        started = time.perf_counter()
        records = backend.collect(jobs)
        best = min(best, time.perf_counter() - started)
    return best, _others_pct(before, _jiffies(pids)), records, paired_runs


def _others_pct(before: Optional[tuple[int, int, int]], after: Optional[tuple[int, int, int]]) -> Optional[float]:
    """Percent of the machine's CPU time between two ``_jiffies`` snapshots not spent by our processes."""
    if not before or not after or after[1] <= before[1]:
        return None
    busy, total, ours = (a - b for a, b in zip(after, before))
    return max(0.0, 100.0 * (busy - ours) / total)


def run_bench_rollout(model_dir: Optional[str] = None, *, episodes: int = DEFAULT_EPISODES,
                      max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS, max_rounds: int = DEFAULT_MAX_ROUNDS,
                      ray_workers: Sequence[int] = (1, 2), repeats: int = DEFAULT_REPEATS,
                      sample: bool = False) -> dict[str, Any]:
    """Time every configuration on the same ``episodes`` jobs; return a dict of rows (see module doc).

    ``sample=True`` samples (temperature 1, seeded per generation call, so the bound's replay still
    reproduces the in-process tokens) instead of decoding greedily; then the Ray runs, whose batches
    differ, generate different tokens and only their tokens/s compare.
    """
    import torch

    if model_dir is None:
        from training.model.default import resolve_default_model

        model_dir = str(resolve_default_model())
    sampling = SamplingConfig(do_sample=sample, seed=0 if sample else None, max_new_tokens=max_new_tokens)
    jobs = bench_jobs(episodes)
    spec = RolloutSpec(model=str(model_dir), **SEATS, sampling=sampling, max_rounds=max_rounds)
    threads_before = torch.get_num_threads()
    result: dict[str, Any] = dict(model=str(model_dir), episodes=episodes, max_new_tokens=max_new_tokens,
                                  sample=sample, repeats=repeats, cpus=os.cpu_count(), load_avg=os.getloadavg()[0])
    inproc = InProcessBackend(spec, torch_threads=1)
    try:
        seconds, others, _, _ = _timed_collect(inproc, jobs, repeats, [os.getpid()])
        with _Recorder(inproc.policy) as rec:
            records = inproc.collect(jobs)
        tokens = model_tokens(records)
        before = _jiffies([os.getpid()])
        bound_s, bound_tokens = _replay(inproc.policy, rec.calls, repeats=repeats)
        halves = [_replay(inproc.policy, rec.calls, part, repeats) for part in (0, 1)]
        bound_others = _others_pct(before, _jiffies([os.getpid()]))
        bound2_s = max(s for s, _ in halves)
        result["bound"] = _row(bound_s, episodes, bound_tokens, others_pct=bound_others)
        result["bound x2 alone"] = _row(bound2_s, episodes, sum(t for _, t in halves), others_pct=bound_others)
        result["inprocess"] = _row(seconds, episodes, tokens, bound_s, others)
        result["inprocess"]["generate_share_pct"] = 100.0 * bound_s / seconds
        result["generate_calls"] = len(rec.calls)
        result["mean_batch"] = sum(len(c[1][0]) for c in rec.calls) / max(1, len(rec.calls))
    finally:
        inproc.close()
        torch.set_num_threads(threads_before)
    result.update(_bench_ray(spec, jobs, ray_workers, bound_s, rec.calls, repeats))
    if "ray x1" in result and "ray x2" in result:
        result["speedup_x2_over_x1"] = result["ray x1"]["seconds"] / result["ray x2"]["seconds"]
        result["bound_speedup_x2"] = bound_s / result["bound x2"]["seconds"]
    return result


class _HalfReplayer:
    """A 1-thread process holding its own ``PolicyModel``: replays one half of every recorded batch."""

    def __init__(self, model_dir: str) -> None:
        import torch

        from training.rollout.policy import PolicyModel

        torch.set_num_threads(1)
        self.policy = PolicyModel(model_dir, device="cpu")

    def replay(self, calls: Sequence[tuple[str, tuple, dict]], part: int, repeats: int) -> tuple[float, int]:
        return _replay(self.policy, calls, part, repeats)

    def pid(self) -> int:
        return os.getpid()


class ParallelBound:
    """Plain generation on two processes: two ``_HalfReplayer`` actors replay both halves of every recorded
    batch at the same time.  ``once()`` returns the slower half's seconds and the tokens of both.

    The actors reserve no CPUs (``num_cpus=0``): they are timed while nothing else runs, and must not wait
    for CPUs that the actors of an already running Ray session hold.
    """

    def __init__(self, model_dir: str, calls: Sequence[tuple[str, tuple, dict]]) -> None:
        import ray

        self.calls = calls
        self.replayers = [ray.remote(num_cpus=0)(_HalfReplayer).remote(model_dir) for _ in range(2)]
        self.pids = ray.get([r.pid.remote() for r in self.replayers], timeout=REPLAY_TIMEOUT_S)
        self._run(self.calls[:1])  # warm-up

    def _run(self, calls: Sequence[tuple[str, tuple, dict]]) -> tuple[float, int]:
        import ray

        runs = ray.get([r.replay.remote(calls, part, 1) for part, r in enumerate(self.replayers)],
                       timeout=REPLAY_TIMEOUT_S)
        return max(s for s, _ in runs), sum(t for _, t in runs)

    def once(self) -> tuple[float, int]:
        return self._run(self.calls)

    def close(self) -> None:
        import ray

        for r in self.replayers:
            ray.kill(r, no_restart=True)


def _bench_ray(spec: RolloutSpec, jobs: Sequence[EpisodeJob], ray_workers: Sequence[int],
               bound_s: float, calls: Sequence[tuple[str, tuple, dict]], repeats: int) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    if not ray_workers:
        return rows
    import ray

    started_ray = not ray.is_initialized()
    if started_ray:
        for key, value in RAY_ENV.items():
            os.environ.setdefault(key, value)
        ray.init(num_cpus=max(ray_workers, default=1), include_dashboard=False, logging_level="WARNING")
    try:
        for n in ray_workers:
            # ray x2 and its bound alternate, one run of each per repeat, so both see the same machine
            paired = ParallelBound(spec.model, calls) if n == 2 else None
            backend = None
            try:
                backend = RayBackend(spec, RayPool(num_workers=n, torch_threads_per_worker=1))
                pids = [os.getpid(), *(paired.pids if paired else [])]
                pids += [info["pid"] for info in ray.get([w.ready.remote() for w in backend.workers])]
                seconds, others, records, paired_runs = _timed_collect(backend, jobs, repeats, pids, paired)
            finally:
                if backend is not None:
                    backend.close()
                if paired is not None:
                    paired.close()
            bound = bound_s if n == 1 else None
            if paired_runs:
                bound = min(s for s, _ in paired_runs)
                rows["bound x2"] = _row(bound, len(jobs), paired_runs[0][1])
            rows[f"ray x{n}"] = _row(seconds, len(jobs), model_tokens(records), bound, others)
    finally:
        if started_ray:
            ray.shutdown()
    return rows


def format_bench_rollout(result: dict[str, Any]) -> str:
    """A small table of the bench result."""
    decoding = "sampled" if result["sample"] else "greedy"
    lines = [f"model {result['model']}: {result['episodes']} episodes ({decoding}, best of {result['repeats']}), "
             f"max_new_tokens {result['max_new_tokens']}, "
             f"{result.get('generate_calls', '?')} generate calls (mean batch {result.get('mean_batch', 0):.1f}), "
             f"{result['cpus']} CPUs, load {result['load_avg']:.2f}",
             f"{'config':<15}{'seconds':>9}{'episodes/s':>12}{'tokens/s':>10}{'overhead':>10}{'others CPU':>12}"]
    for name in ("bound", "inprocess", "ray x1", "bound x2 alone", "bound x2", "ray x2"):
        row = result.get(name)
        if row is None:
            continue
        over = f"{row['overhead_pct']:+.1f}%" if "overhead_pct" in row else "-"
        others = f"{row['others_cpu_pct']:.0f}%" if row.get("others_cpu_pct") is not None else "-"
        lines.append(f"{name:<15}{row['seconds']:>9.2f}{row['episodes_per_s']:>12.2f}"
                     f"{row['tokens_per_s']:>10.0f}{over:>10}{others:>12}")
    noisy = [row.get("others_cpu_pct") or 0.0 for row in result.values() if isinstance(row, dict)]
    if noisy and max(noisy) > NOISY_NEIGHBOUR_PCT:
        lines.append(f"WARNING: other processes used up to {max(noisy):.0f}% of the CPU during timed runs; "
                     "rerun on a quiet machine")
    if "inprocess" in result:
        lines.append(f"plain generation would take {result['inprocess']['generate_share_pct']:.0f}% "
                     "of the in-process rollout time")
    if "speedup_x2_over_x1" in result:
        lines.append(f"ray x2 / ray x1 speedup {result['speedup_x2_over_x1']:.2f}x (target >= {TARGET_SPEEDUP}x; "
                     f"the bound itself scales {result['bound_speedup_x2']:.2f}x); overhead target "
                     f"<= {TARGET_OVERHEAD_PCT:.0f}%")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=None, help="checkpoint dir (default: the embedded model)")
    parser.add_argument("--episodes", type=positive_int, default=DEFAULT_EPISODES,
                        help="episodes per configuration (default %(default)s)")
    parser.add_argument("--max-new-tokens", type=positive_int, default=DEFAULT_MAX_NEW_TOKENS,
                        help="new tokens per model turn (default %(default)s)")
    parser.add_argument("--max-rounds", type=positive_int, default=DEFAULT_MAX_ROUNDS,
                        help="rounds per episode (default %(default)s)")
    parser.add_argument("--ray-workers", type=positive_int, nargs="*", default=[1, 2],
                        help="Ray pool sizes to time (default 1 2; none: in-process rows only, no Ray)")
    parser.add_argument("--repeats", type=positive_int, default=DEFAULT_REPEATS,
                        help="every timing is the best of this many runs (default %(default)s)")
    parser.add_argument("--sample", action="store_true", help="sample (seeded) instead of greedy decoding")


def run(args: argparse.Namespace) -> int:
    """Run the bench with ``args`` and print the table."""
    result = run_bench_rollout(args.model, episodes=args.episodes, max_new_tokens=args.max_new_tokens,
                               max_rounds=args.max_rounds, ray_workers=args.ray_workers,
                               repeats=args.repeats, sample=args.sample)
    print(format_bench_rollout(result))
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m training.bench.rollout``: the same as ``replicalab bench rollout``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
