"""Rollout backends: where ``play_jobs`` runs.  One interface, two implementations.

Every backend has the same three calls::

    backend.set_weights(state_numpy, version)   # new policy weights (numpy arrays) and their version
    records = backend.collect(jobs, sampling_seed=step_seed)   # one RolloutRecord per job, in job order
    backend.close()

``sampling_seed`` (optional) reseeds sampling for one collect: shard ``k`` samples with seed
``sampling_seed * SHARD_SEED_STRIDE + k`` (the in-process backend is shard 0), so a step is
reproducible for a given worker count, and a shard re-run after a fault replays the same episodes.

``InProcessBackend`` plays in the calling process.  ``RayBackend`` (``training.rollout.ray_backend``)
keeps a pool of ``RolloutWorker``
actors (``training.rollout.worker``), each owning a policy copy and its frozen opponents; weights are
put into the object store once per version and every worker loads them.  ``collect`` splits the jobs
into contiguous shards (one per worker, GRPO groups kept whole when that costs little balance), runs
them concurrently and gathers the records by ``job_id``.

Fault contract: a worker that dies at any moment -- while collecting, idle between calls, or while
loading weights -- is replaced by a fresh actor (loaded with the current weights and version) when the
next call reaches it, and its whole unfinished shard is re-run; the log names the worker (and its pid)
and the episodes re-run; ``restarts`` counts replacements.  After ``max_restarts`` replacements within
one call it raises ``WorkerFailure`` (one line).  Either way every job appears exactly once in the
output (asserted), and every record carries the current weights version.

A Ray session the backend starts itself is shut down by ``close`` (the training driver calls it in a
``finally``, on signals too).  ``session_record`` (a file in the run directory) records that session;
a later backend given the same file first kills what is left of it when the driver that owned it is
dead (a SIGKILLed driver cannot clean up after itself).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Literal, Mapping, Optional, Sequence, Union

from training.config.model import SamplingConfig, VLLMConfig
from training.rollout.records import EpisodeJob, RolloutRecord

if TYPE_CHECKING:
    from training.rollout.cluster import ClusterResources
    from training.rollout.placement import PlacementPlan
    from training.rollout.ray_backend import RayBackend

logger = logging.getLogger(__name__)

#: Environment for a Ray session this module starts (quiet, offline, no token auth).
RAY_ENV: dict[str, str] = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
#: Seconds to wait for a new worker to load its model before giving up.
WORKER_READY_TIMEOUT_S = 180.0
#: A shard boundary moves to the nearest GRPO-group boundary if that shifts it by at most this
#: fraction of the ideal shard size; otherwise the group is split across workers.
GROUP_CUT_TOLERANCE = 0.25
#: Name of the in-process "worker" in records.
INPROCESS_WORKER = "inprocess"
#: Per-shard sampling seeds are ``sampling_seed * SHARD_SEED_STRIDE + shard`` (distinct below this many shards).
SHARD_SEED_STRIDE = 1024


class WorkerFailure(RuntimeError):
    """Rollout workers kept dying: more than ``max_restarts`` replacements within one call."""


def shard_sampling(sampling: SamplingConfig, sampling_seed: Optional[int], shard: int) -> SamplingConfig:
    """``sampling`` reseeded for one shard of one collect (unchanged when ``sampling_seed`` is None)."""
    if sampling_seed is None:
        return sampling
    return sampling.model_copy(update={"seed": sampling_seed * SHARD_SEED_STRIDE + shard})


def check_unique_job_ids(jobs: Sequence[EpisodeJob]) -> None:
    """Raise ``ValueError`` if two jobs share a ``job_id`` (results are keyed by it)."""
    ids = [job.job_id for job in jobs]
    if len(set(ids)) != len(ids):
        raise ValueError("job_id must be unique within a collect")


def shard_jobs(jobs: Sequence[EpisodeJob], num_shards: int) -> list[list[EpisodeJob]]:
    """Split ``jobs`` into at most ``num_shards`` non-empty contiguous shards of near-equal size.

    Each cut prefers the nearest boundary between consecutive jobs of different ``group`` when it is
    within ``GROUP_CUT_TOLERANCE`` of the ideal shard size, so GRPO groups usually stay on one worker.
    """
    n = len(jobs)
    if num_shards < 1:
        raise ValueError("num_shards must be >= 1")
    group_cuts = [i for i in range(1, n) if jobs[i].group != jobs[i - 1].group]
    size = n / num_shards
    cuts = [0]
    for k in range(1, num_shards):
        ideal = round(k * size)
        near = min(group_cuts, key=lambda c: (abs(c - ideal), c), default=None)
        cut = near if near is not None and abs(near - ideal) <= GROUP_CUT_TOLERANCE * size else ideal
        cuts.append(max(cut, cuts[-1]))
    cuts.append(n)
    return [list(jobs[a:b]) for a, b in zip(cuts, cuts[1:]) if b > a]


def _check_complete(jobs: Sequence[EpisodeJob], records: Mapping[int, RolloutRecord]) -> list[RolloutRecord]:
    """Records for ``jobs`` in job order; every job exactly once, nothing foreign."""
    wanted = {job.job_id for job in jobs}
    if set(records) != wanted:
        missing, extra = sorted(wanted - set(records)), sorted(set(records) - wanted)
        raise AssertionError(f"rollout lost or invented episodes: missing {missing[:10]}, extra {extra[:10]}")
    ordered = [records[job.job_id] for job in jobs]
    if any(rec.job != job for rec, job in zip(ordered, jobs)):
        raise AssertionError("a record carries a different job than the one it was keyed under")
    return ordered


class InProcessBackend:
    """Plays every job in this process with one ``PolicyModel`` (batched across episodes).

    ``frozen`` lists the ``model:DIR`` seat specs to load as frozen opponents (default: those among
    ``scientist`` and ``lab_manager``); ``torch_threads`` sets this process's torch threads.
    """

    def __init__(self, model: str, *, scientist: str, lab_manager: str, sampling: SamplingConfig,
                 max_rounds: int = 6, device: str = "cpu", torch_threads: Optional[int] = None,
                 frozen: Optional[Sequence[str]] = None, chat_template: Optional[str] = None) -> None:
        import torch

        from training.rollout.play import load_frozen
        from training.rollout.policy import PolicyModel

        if torch_threads is not None:
            torch.set_num_threads(torch_threads)
        self.seats = dict(scientist=scientist, lab_manager=lab_manager)
        self.sampling = sampling
        self.max_rounds = max_rounds
        self.policy = PolicyModel(model, sampling=sampling, device=device, chat_template=chat_template)
        self.frozen = load_frozen(frozen if frozen is not None else [scientist, lab_manager], device,
                                  chat_template=chat_template)
        self.restarts = 0  # interface parity with RayBackend; nothing to restart here

    @property
    def version(self) -> int:
        """Weights version the next records will carry (0: the checkpoint as loaded)."""
        return self.policy.weights_version

    def set_weights(self, state: Mapping[str, Any], version: int) -> None:
        """Load new weights (numpy arrays or tensors) and tag later records with ``version``."""
        self.policy.load_state(state, version)

    def collect(self, jobs: Sequence[EpisodeJob], *, sampling_seed: Optional[int] = None) -> list[RolloutRecord]:
        """Play ``jobs``; one record per job, in job order."""
        from training.rollout.play import play_jobs

        check_unique_job_ids(jobs)
        if not jobs:
            return []
        sampling = shard_sampling(self.sampling, sampling_seed, 0)
        records = play_jobs(self.policy, jobs, **self.seats, sampling=sampling,
                            max_rounds=self.max_rounds, frozen=self.frozen,
                            weights_version=self.version, worker=INPROCESS_WORKER)
        return _check_complete(jobs, {rec.job.job_id: rec for rec in records})

    def close(self) -> None:
        """Nothing to release beyond memory; drops the model references."""
        self.frozen = {}


Backend = Union[InProcessBackend, "RayBackend"]


def make_backend(kind: Literal["inprocess", "ray"], *, model: str, scientist: str, lab_manager: str,
                 sampling: SamplingConfig, max_rounds: int = 6, device: str = "cpu",
                 frozen: Optional[Sequence[str]] = None, torch_threads: Optional[int] = None,
                 num_workers: int = 1, torch_threads_per_worker: int = 1, max_restarts: int = 3,
                 ray_address: Optional[str] = None, num_gpus_per_worker: Optional[float] = None,
                 chat_template: Optional[str] = None, session_record: Optional[Path] = None,
                 plan_for: Optional[Callable[["ClusterResources"], "PlacementPlan"]] = None,
                 engine: str = "hf", vllm: Optional[VLLMConfig] = None, python: Optional[str] = None) -> Backend:
    """``InProcessBackend`` for ``"inprocess"``, ``RayBackend`` for ``"ray"``.

    Callers may pass every option whatever the kind: ``torch_threads`` only applies in-process;
    ``num_workers``, ``torch_threads_per_worker``, ``max_restarts``, ``ray_address`` and
    ``num_gpus_per_worker``, ``session_record``, ``plan_for`` and the engine (``engine``, ``vllm``, and
    ``python``: the workers' interpreter) only to Ray.  ``plan_for(cluster)`` (a
    training run's placement, ``training.rollout.preflight``) plans the run on the connected cluster
    before any worker starts; the workers then sit in its placement group, on its device and GPU share.
    """
    common = dict(model=model, scientist=scientist, lab_manager=lab_manager, sampling=sampling,
                  max_rounds=max_rounds, device=device, frozen=frozen, chat_template=chat_template)
    if kind == "inprocess":
        if engine != "hf":
            raise ValueError(f"the {engine} engine runs in Ray rollout workers only (rollout.backend=ray)")
        return InProcessBackend(**common, torch_threads=torch_threads)
    if kind == "ray":
        from training.rollout.ray_backend import RayBackend

        return RayBackend(**common, num_workers=num_workers, torch_threads_per_worker=torch_threads_per_worker,
                          max_restarts=max_restarts, ray_address=ray_address,
                          num_gpus_per_worker=num_gpus_per_worker, session_record=session_record,
                          plan_for=plan_for, engine=engine, vllm=vllm, python=python)
    raise ValueError(f"unknown rollout backend {kind!r}: use 'inprocess' or 'ray'")
