"""``RayBackend``: a pool of Ray ``RolloutWorker`` actors behind the rollout contract
(``training.rollout.contract``: the spec, the sharding and seeding rules and the fault contract).

Weights reach the workers over a collective (``pool.weight_sync="collective"``, ``CollectiveSync``: the
model's dtype, in buckets, the driver as rank 0 of a group with every worker) or through the object store (put
once per version as float32 numpy arrays, every worker loads them; the fallback, and what a replacement worker
and a failed collective transfer get); ``collect`` splits the jobs into contiguous shards (one per worker), runs them concurrently and gathers the records by ``job_id``;
``submit`` starts one and returns at once, ``fetch`` gathers it (what lets rollouts run a step ahead of
the learner).
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
from training.rollout.collective_sync import DEFAULT_BUCKET_MIB, WEIGHT_SYNCS, CollectiveSync, CollectiveUnavailable
from training.rollout.contract import (
    RolloutSpec,
    WorkerFailure,
    check_complete,
    check_unique_job_ids,
    shard_jobs,
)
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
    fault recovery.  ``restarts`` counts workers replaced so far (over all collects)."""

    def __init__(self, spec: RolloutSpec, pool: RayPool = RayPool()) -> None:
        import ray

        if pool.num_workers < 1:
            raise ValueError("num_workers must be >= 1")
        if pool.weight_sync not in WEIGHT_SYNCS:
            raise ValueError(f"weight_sync {pool.weight_sync!r}; valid: {', '.join(WEIGHT_SYNCS)}")
        self.session = connect(pool.ray_address, pool.session_record)
        self.placed: Optional[PlacedGroup] = None
        self.workers: list[Any] = []
        self._state: Optional[dict[str, Any]] = None  # the current weights, as given to set_weights
        self._state_ref: Any = None  # the current weights in the object store (put when a worker needs them)
        self.sync = (CollectiveSync(bucket_mib=pool.sync_bucket_mib, timeout_s=pool.sync_timeout_s)
                     if pool.weight_sync == "collective" else None)
        self._snapshot_refs: dict[str, Any] = {}  # the frozen snapshots in the object store, by name
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
        self.ready_timeout_s = ready_timeout_s(spec.model, pool.ready_timeout_s)
        self._num_gpus = num_gpus
        self.num_workers = pool.num_workers
        self.max_restarts = pool.max_restarts
        self.restarts = 0
        self.version = 0  # the checkpoint as loaded
        self._spawned = 0
        self.names: list[str] = []  # each slot's worker name (ray-K, K counting every worker started)
        self.pids: list[Optional[int]] = []  # each slot's OS process id, once it reported ready
        try:
            for slot in range(self.num_workers):
                worker, name = self._spawn(slot)
                self.workers.append(worker)
                self.names.append(name)
            self.pids = [info["pid"] for info in self._wait_ready(self.workers)]
        except BaseException:
            self.close()
            raise

    # -- workers ---------------------------------------------------------------------------------
    def _spawn(self, slot: int) -> tuple[Any, str]:
        """A new worker for ``slot`` (in the slot's placement-group bundle when the run is placed)."""
        from training.rollout.worker import make_worker

        self._spawned += 1
        name = f"ray-{self._spawned - 1}"
        options = self.placed.worker_options(slot) if self.placed is not None else None
        worker = make_worker(self.spec, name=name, torch_threads=self.pool.torch_threads_per_worker,
                             num_gpus=self._num_gpus, options=options, python=self.pool.python)
        if self._state is not None:
            worker.set_weights.remote(self._current_ref(), self.version)  # queued before any collect
        if self._snapshot_refs:
            self._send_snapshots(worker)
        return worker, name

    def _wait_ready(self, workers: Sequence[Any]) -> list[dict[str, Any]]:
        import ray

        refs = [w.ready.remote() for w in workers]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=self.ready_timeout_s)
        if len(ready) < len(refs):
            raise RuntimeError(f"rollout workers not ready after {self.ready_timeout_s:.0f}s (rollout.ready_timeout_s) "
                               f"(too few free CPUs/GPUs in the Ray cluster for {len(refs)} workers?)")
        return ray.get(refs)

    def _replace(self, slot: int, error: BaseException, during: str) -> None:
        """Replace the dead worker of ``slot`` by a fresh one (its weights load queued first)."""
        import ray

        self.restarts += 1
        logger.warning("rollout worker %s (slot %d, pid %s) died %s (%s); starting a replacement "
                       "(restart %d in all)", self.names[slot], slot, self.pids[slot], during,
                       type(error).__name__, self.restarts)
        try:
            ray.kill(self.workers[slot], no_restart=True)
        except Exception:  # already gone
            pass
        self.workers[slot], self.names[slot] = self._spawn(slot)
        self.pids[slot] = None
        self._note_pid(slot)

    def _note_pid(self, slot: int) -> None:
        """Ask the slot's worker for its pid without waiting (logged when a later fault names it)."""
        worker = self.workers[slot]
        ref = worker.ready.remote()

        def remember(result: Any, slot: int = slot, worker: Any = worker) -> None:
            if self.workers and self.workers[slot] is worker and isinstance(result, dict):
                self.pids[slot] = result.get("pid")

        try:
            ref._on_completed(remember)
        except Exception:  # an older Ray without completion callbacks: the pid stays unknown
            pass

    def _give_up(self, failures: int, error: BaseException, during: str) -> WorkerFailure:
        return WorkerFailure(f"rollout gave up: {failures} worker failures {during} "
                             f"(rollout.max_worker_restarts={self.max_restarts}); last: {type(error).__name__}: "
                             + " ".join(str(error).split())[:300])

    # -- interface -------------------------------------------------------------------------------
    def set_weights(self, state: Mapping[str, Any], version: int) -> None:
        """(After finishing a pending ``submit``.) Every worker loads ``state`` (tensors or numpy arrays) and tags later records ``version``: over the
        weight-sync group, else through the object store (put once).  A worker found dead (idle since the last
        call, or dying while it loads) is replaced; its replacement loads these weights (object store) before
        anything else; a worker whose collective receive failed gets them through the object store too.
        ``state`` must stay unchanged until the next ``set_weights`` (replacements read it)."""
        self._settle()
        self._state, self._state_ref, self.version = dict(state), None, version
        during = f"while loading weights version {version}"
        by_store = list(range(self.num_workers))
        if self.sync is not None:
            by_store = self._sync_collective(version, during)
        if by_store:
            self._broadcast(lambda w: w.set_weights.remote(self._current_ref(), version),
                            lambda w: w.weights_version.remote(), version, during, slots=by_store)

    def _current_ref(self) -> Any:
        """The current weights in the object store (float32 numpy arrays, tied ones once), put on first need."""
        import ray

        from training.rollout.buckets import numpy_payload

        if self._state_ref is None:
            self._state_ref = ray.put(numpy_payload(self._state or {}, tied_once=True))
        return self._state_ref

    def _sync_collective(self, version: int, during: str) -> list[int]:
        """Send the current weights over the weight-sync group (formed again if its members changed); return the
        slots the object store must still serve.  A group that cannot form while every worker is alive turns the
        collective off for the backend's life (one warning)."""
        import ray

        try:
            self.sync.ensure_group(self.workers, self.names, self.sync.backend_for(self._state, self.spec.device))
        except CollectiveUnavailable as error:
            restarts = self.restarts
            self._broadcast(_ping, _ping, None, during, check=False)  # replaces a worker that died meanwhile
            if self.restarts == restarts:  # no dead worker explains it
                logger.warning("%s; weights go through the object store from now on", error)
                self.sync = None
            return list(range(self.num_workers))
        pending, _ = self.sync.push(self.workers, self._state, version)
        fallback, replaced, failures = [], [], 0
        while pending:
            (ref,), _ = ray.wait(list(pending), num_returns=1)
            slot = pending.pop(ref)
            try:
                got = ray.get(ref)
            except _worker_failures() as error:
                failures += 1
                self._replace(slot, error, during)  # the replacement loads the weights from the object store
                if failures > self.max_restarts:
                    raise self._give_up(failures, error, during) from error
                replaced.append(slot)
                continue
            except ray.exceptions.RayTaskError as error:  # its receive failed with the group: the store serves it
                logger.warning("worker %s did not receive weights version %d over the group (%s)",
                               self.names[slot], version, type(error.cause).__name__)
                fallback.append(slot)
                continue
            if got != version:
                raise RuntimeError(f"worker {self.names[slot]} reports {got} {during}, expected {version}")
        if fallback or replaced:
            self.sync.drop_group()
        if replaced:
            self._broadcast(_ping, _ping, version, during, slots=replaced)
        return fallback

    def set_snapshots(self, snapshots: Mapping[str, Mapping[str, Any]]) -> None:
        """Every worker holds exactly these frozen snapshots (each put into the object store once, when new); a
        replacement worker loads them after the weights."""
        import ray

        self._settle()
        self._snapshot_refs = {name: self._snapshot_refs.get(name) or ray.put(dict(state))
                               for name, state in snapshots.items()}
        names = sorted(self._snapshot_refs)
        self._broadcast(lambda w: self._send_snapshots(w), lambda w: self._send_snapshots(w), names,
                        f"while loading snapshots {names}")

    def _send_snapshots(self, worker: Any) -> Any:
        names = sorted(self._snapshot_refs)
        return worker.set_snapshots.remote(names, *(self._snapshot_refs[n] for n in names))

    def _broadcast(self, call: Any, confirm: Any, expected: Any, during: str,
                   slots: Optional[Sequence[int]] = None, check: bool = True) -> None:
        """``call(worker)`` on every worker (of ``slots``), each result checked against ``expected`` (unless not
        ``check``); a worker that dies is replaced (its replacement is set up by ``_spawn``), then
        ``confirm(worker)`` asks it again."""
        import ray

        slots = range(len(self.workers)) if slots is None else slots
        pending = {call(self.workers[slot]): slot for slot in slots}
        failures = 0
        while pending:
            (ref,), _ = ray.wait(list(pending), num_returns=1)
            slot = pending.pop(ref)
            try:
                got = ray.get(ref)
            except _worker_failures() as error:
                failures += 1
                self._replace(slot, error, during)
                if failures > self.max_restarts:
                    raise self._give_up(failures, error, during) from error
                pending[confirm(self.workers[slot])] = slot  # queued after its setup
                continue
            if check and got != expected:
                raise RuntimeError(f"worker {self.names[slot]} reports {got} {during}, expected {expected}")

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
        import ray

        if self._pending is pending:
            self._pending = None
        shards, seeds, refs = pending.shards, pending.seeds, pending.refs
        records: dict[int, RolloutRecord] = {}
        failures = 0
        while refs:
            (ref,), _ = ray.wait(list(refs), num_returns=1)
            slot = refs.pop(ref)
            try:
                shard_records = ray.get(ref)
            except _worker_failures() as error:
                failures += 1
                ids = [job.job_id for job in shards[slot]]
                during = f"before returning its {len(ids)} episodes (jobs {ids[0]}..{ids[-1]})"
                self._replace(slot, error, during)  # the pool stays whole for the next call either way
                if failures > self.max_restarts:
                    raise self._give_up(failures, error, "in one collect") from error
                logger.warning("re-running %d episodes (jobs %s) on %s", len(ids), ids, self.names[slot])
                refs[self.workers[slot].collect.remote(shards[slot], seeds[slot])] = slot
                continue
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

        for worker in self.workers:
            try:
                ray.kill(worker, no_restart=True)
            except Exception:  # already gone
                pass
        self.workers, self._pending = [], None
        self._state, self._state_ref = None, None
        if self.sync is not None:
            self.sync.drop_group()
        placed, self.placed = self.placed, None
        if placed is not None and ray.is_initialized():
            placed.remove()
        self.session.close()

def _ping(worker: Any) -> Any:
    """Ask ``worker`` which weights version it holds (after everything queued before)."""
    return worker.weights_version.remote()


def _worker_failures() -> tuple[type[BaseException], ...]:
    """The Ray exceptions that mean "this worker is gone", as opposed to a bug in the episode code."""
    from ray import exceptions as rex

    names = ("RayActorError", "ActorDiedError", "ActorUnavailableError", "WorkerCrashedError")
    return tuple(getattr(rex, name) for name in names if hasattr(rex, name))


def _on_device(spec: RolloutSpec, device: str) -> RolloutSpec:
    """``spec`` with the models on ``device`` (the placement plan's worker device)."""
    return spec if spec.device == device else replace(spec, device=device)
