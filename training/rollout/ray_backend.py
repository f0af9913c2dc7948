"""``RayBackend``: a pool of Ray ``RolloutWorker`` actors behind the rollout contract
(``training.rollout.contract``: the spec, the sharding and seeding rules and the fault contract).

``collect`` splits the jobs into contiguous shards (one per worker), runs them concurrently and gathers the
records by ``job_id``; ``submit`` starts one and returns at once, ``fetch`` gathers it (what lets rollouts run a
step ahead of the learner).  The workers and their fault handling are ``training.rollout.ray_workers``; how the
weights and snapshots reach them (a collective, else the object store) is ``training.rollout.ray_weights``.
A Ray session the backend starts itself is shut down by ``close`` (``training.cluster.ray_session``; the
training driver calls it in a ``finally``, on signals too).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

from training.cluster.placement_group import PlacedGroup, adopt_trial_group, make_placement_group
from training.cluster.plan import PlacementPlan
from training.cluster.ray_session import connect
from training.cluster.resources import ClusterResources
from training.rollout.collective_sync import DEFAULT_BUCKET_MIB, WEIGHT_SYNCS, CollectiveSync
from training.rollout.contract import RolloutSpec, check_complete, check_unique_job_ids, shard_jobs
from training.rollout.ray_weights import WorkerWeights
from training.rollout.ray_workers import WorkerSlots
from training.rollout.ready import ready_timeout_s
from training.rollout.records import EpisodeJob, RolloutRecord

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RayPool:
    """Where a ``RayBackend``'s workers run: how many, their threads (and CPUs), restarts allowed per call,
    the Ray cluster (``ray_address``; None: the initialised session, else a new local one), each worker's GPU
    share (None: 0 on CPU, else the cluster's GPUs shared evenly, at most one each), the file that records a
    session the backend starts (``session_record``), the run's placement (``plan_for(cluster)``: planned on the
    connected cluster before any worker starts; the workers then sit in its placement group, on its device and
    GPU share), the workers' interpreter (``python``: the vLLM environment for the vllm engine) and how weights
    reach them (``weight_sync``: ``collective`` or ``object_store``; the collective's bucket size in MiB and
    the seconds one of its collectives may take)."""

    num_workers: int = 1
    torch_threads_per_worker: int = 1
    max_restarts: int = 3
    ray_address: Optional[str] = None
    num_gpus_per_worker: Optional[float] = None
    session_record: Optional[Path] = None
    plan_for: Optional[Callable[[ClusterResources], PlacementPlan]] = None
    python: Optional[str] = None
    ready_timeout_s: Optional[float] = None  # seconds a new worker may take to load; None: by the weights' size
    weight_sync: str = "collective"
    sync_bucket_mib: int = DEFAULT_BUCKET_MIB
    sync_timeout_s: float = 120.0


@dataclass
class PendingCollect:
    """A collect ``RayBackend.submit`` started: its jobs, shards and shard seeds, the workers' result refs (slot by
    ref), the weights version it plays, and its records once finished."""

    jobs: list[EpisodeJob]
    shards: list[list[EpisodeJob]]
    seeds: list[Optional[int]]
    refs: dict[Any, int]
    version: int
    records: Optional[list[RolloutRecord]] = None


class RayBackend:
    """A pool of ``pool.num_workers`` Ray ``RolloutWorker`` actors playing ``spec`` with weight broadcast and
    fault recovery.  ``workers``, ``names`` and ``pids`` describe each slot's worker (``WorkerSlots``);
    ``restarts`` counts workers replaced so far (over all collects), ``max_restarts`` those allowed per call."""

    def __init__(self, spec: RolloutSpec, pool: RayPool = RayPool()) -> None:
        import ray

        if pool.num_workers < 1:
            raise ValueError("num_workers must be >= 1")
        if pool.weight_sync not in WEIGHT_SYNCS:
            raise ValueError(f"weight_sync {pool.weight_sync!r}; valid: {', '.join(WEIGHT_SYNCS)}")
        self.session = connect(pool.ray_address, pool.session_record)
        self.placed: Optional[PlacedGroup] = None
        self.slots: Optional[WorkerSlots] = None  # the workers, once the placement is known
        self.weights = WorkerWeights(CollectiveSync(bucket_mib=pool.sync_bucket_mib, timeout_s=pool.sync_timeout_s)
                                     if pool.weight_sync == "collective" else None)
        self._pending: Optional[PendingCollect] = None  # a submitted collect not finished yet
        num_gpus = pool.num_gpus_per_worker
        try:
            if pool.plan_for is not None:  # planned (and refused, if it cannot work) before any model loads
                plan = pool.plan_for(ClusterResources.from_ray())
                self.placed = adopt_trial_group(plan) or make_placement_group(plan)  # a sweep trial's, else its own
                spec = _on_device(spec, plan.worker_device)
                num_gpus = plan.gpus_per_worker
        except BaseException:
            self.close()
            raise
        if num_gpus is None:
            gpus = 0.0 if spec.device == "cpu" else float(ray.cluster_resources().get("GPU", 0.0))
            num_gpus = min(1.0, gpus / pool.num_workers)
        self.spec = spec
        self.pool = pool
        self.num_workers = pool.num_workers
        self.slots = WorkerSlots(spec, num_gpus=num_gpus, threads=pool.torch_threads_per_worker, python=pool.python,
                                 placed=self.placed, max_restarts=pool.max_restarts,
                                 ready_timeout_s=ready_timeout_s(spec.model, pool.ready_timeout_s),
                                 set_up=self.weights.set_up)
        try:
            self.slots.start(self.num_workers)
        except BaseException:
            self.close()
            raise

    # -- the workers (``WorkerSlots``) and what they hold (``WorkerWeights``) -------------------------
    @property
    def workers(self) -> list[Any]:
        return self.slots.workers

    @property
    def names(self) -> list[str]:
        return self.slots.names

    @property
    def pids(self) -> list[Optional[int]]:
        return self.slots.pids

    @property
    def restarts(self) -> int:
        return self.slots.restarts

    @property
    def max_restarts(self) -> int:
        return self.slots.max_restarts

    @max_restarts.setter
    def max_restarts(self, value: int) -> None:
        self.slots.max_restarts = value

    @property
    def version(self) -> int:
        """The weights version every worker holds (0: the checkpoint as loaded)."""
        return self.weights.version

    @property
    def sync(self) -> Optional[CollectiveSync]:
        """The weight-sync group (None: weights go through the object store)."""
        return self.weights.sync

    # -- interface -------------------------------------------------------------------------------
    def set_weights(self, state: Mapping[str, Any], version: int) -> None:
        """(After finishing a pending ``submit``.) Every worker loads ``state`` (tensors or numpy arrays) and tags
        later records ``version`` (``WorkerWeights.load``: over the weight-sync group, else the object store; a
        worker found dead is replaced and its replacement loads them first).  ``state`` must stay unchanged until
        the next ``set_weights`` (replacements read it)."""
        self._settle()
        self.weights.load(self.slots, state, version)

    def set_snapshots(self, snapshots: Mapping[str, Mapping[str, Any]]) -> None:
        """Every worker holds exactly these frozen snapshots (each put into the object store once, when new); a
        replacement worker loads them after the weights."""
        self._settle()
        self.weights.load_snapshots(self.slots, snapshots)

    def collect(self, jobs: Sequence[EpisodeJob], *, sampling_seed: Optional[int] = None) -> list[RolloutRecord]:
        """Play ``jobs`` on the pool; one record per job, in job order, each job exactly once."""
        return self.fetch(self.submit(jobs, sampling_seed=sampling_seed))

    def submit(self, jobs: Sequence[EpisodeJob], *, sampling_seed: Optional[int] = None) -> "PendingCollect":
        """Start playing ``jobs`` on the pool and return at once; ``fetch`` waits for the records.  While it is
        pending, any other call (``set_weights``, ``set_snapshots``, ``collect``, ``submit``) first finishes it and
        keeps its records for ``fetch``: a pending collect always plays the weights it was submitted with."""
        self._settle()
        check_unique_job_ids(jobs)
        shards = shard_jobs(jobs, self.num_workers) if jobs else []
        seeds = [sampling_seed] * len(shards)  # each turn's stream is its job's (play.row_seed)
        refs = {self.workers[slot].collect.remote(shard, seeds[slot]): slot for slot, shard in enumerate(shards)}
        self._pending = PendingCollect(list(jobs), shards, seeds, refs, self.version)
        return self._pending

    def fetch(self, pending: "PendingCollect") -> list[RolloutRecord]:
        """The records of a ``submit`` (waiting for them, re-running the shards of workers that die)."""
        if pending.records is None:
            self._finish(pending)
        return pending.records

    def _settle(self) -> None:
        if getattr(self, "_pending", None) is not None:
            self._finish(self._pending)

    def _finish(self, pending: "PendingCollect") -> None:
        if self._pending is pending:
            self._pending = None
        shards, seeds = pending.shards, pending.seeds
        records: dict[int, RolloutRecord] = {}

        def died(slot: int) -> str:
            ids = [job.job_id for job in shards[slot]]
            return f"before returning its {len(ids)} episodes (jobs {ids[0]}..{ids[-1]})"

        def redo(slot: int) -> Any:  # the replacement plays the dead worker's shard again
            logger.warning("re-running %d episodes (jobs %s) on %s", len(shards[slot]),
                           [job.job_id for job in shards[slot]], self.names[slot])
            return self.workers[slot].collect.remote(shards[slot], seeds[slot])

        for slot, shard_records in self.slots.drain(pending.refs, "in one collect", redo, died=died):
            self._absorb(shards[slot], shard_records, records)
        pending.records = check_complete(pending.jobs, records)

    def _absorb(self, shard: Sequence[EpisodeJob], got: Sequence[RolloutRecord],
                records: dict[int, RolloutRecord]) -> None:
        if [rec.job.job_id for rec in got] != [job.job_id for job in shard]:
            raise AssertionError("a worker returned records that do not match its shard")
        for rec in got:
            if rec.job.job_id in records:
                raise AssertionError(f"episode {rec.job.job_id} counted twice")
            if rec.weights_version != self.version:
                raise RuntimeError(f"stale record: weights version {rec.weights_version}, "
                                   f"expected {self.version}")
            records[rec.job.job_id] = rec

    def worker_states(self) -> list[dict[str, Any]]:
        """Every worker's parameters as numpy arrays (to verify a broadcast)."""
        import ray

        return ray.get([w.state_numpy.remote() for w in self.workers])

    def close(self) -> None:
        """Kill the workers; shut Ray down only if this backend started it."""
        import ray

        if self.slots is not None:
            self.slots.kill()
        self._pending = None
        self.weights.close()
        placed, self.placed = self.placed, None
        if placed is not None and ray.is_initialized():
            placed.remove()
        self.session.close()


def _on_device(spec: RolloutSpec, device: str) -> RolloutSpec:
    """``spec`` with the models on ``device`` (the placement plan's worker device)."""
    return spec if spec.device == device else replace(spec, device=device)
