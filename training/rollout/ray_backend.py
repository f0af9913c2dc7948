"""``RayBackend``: a pool of Ray ``RolloutWorker`` actors behind the rollout-backend interface
(``training.rollout.backends``: the interface, the sharding and seeding rules and the fault contract)."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Sequence

from training.config.model import SamplingConfig, VLLMConfig
from training.rollout.backends import (
    RAY_ENV,
    WORKER_READY_TIMEOUT_S,
    WorkerFailure,
    _check_complete,
    check_unique_job_ids,
    shard_jobs,
    shard_sampling,
)
from training.rollout.ray_session import clean_stale_session, kill_session_processes, session_ids
from training.rollout.records import EpisodeJob, RolloutRecord

if TYPE_CHECKING:
    from training.rollout.cluster import ClusterResources
    from training.rollout.placement import PlacementPlan
    from training.rollout.placement_group import PlacedGroup

logger = logging.getLogger(__name__)


class RayBackend:
    """A pool of ``num_workers`` Ray ``RolloutWorker`` actors with weight broadcast and fault recovery.

    Uses an already initialised Ray session, else connects to ``ray_address``, else starts a local
    Ray.  Each worker runs torch with ``torch_threads_per_worker`` threads and reserves that many CPUs.
    ``device`` is each worker's torch device; ``num_gpus_per_worker`` (default: 0 on ``"cpu"``, else
    the cluster's GPUs shared evenly, at most one each) is what each worker reserves.  ``frozen`` as
    for ``InProcessBackend``.  ``restarts`` counts workers replaced so far (over all collects).
    """

    def __init__(self, model: str, *, num_workers: int, scientist: str, lab_manager: str,
                 sampling: SamplingConfig, max_rounds: int = 6, torch_threads_per_worker: int = 1,
                 max_restarts: int = 3, ray_address: Optional[str] = None, device: str = "cpu",
                 num_gpus_per_worker: Optional[float] = None,
                 frozen: Optional[Sequence[str]] = None, chat_template: Optional[str] = None,
                 session_record: Optional[Path] = None,
                 plan_for: Optional[Callable[["ClusterResources"], "PlacementPlan"]] = None,
                 engine: str = "hf", vllm: Optional[VLLMConfig] = None, python: Optional[str] = None) -> None:
        import ray

        if num_workers < 1:
            raise ValueError("num_workers must be >= 1")
        self._owns_ray = not ray.is_initialized()
        self._session_name: Optional[str] = None
        self._raylet_pid: Optional[int] = None
        self._session_record = Path(session_record) if session_record is not None else None
        if self._owns_ray:
            for key, value in RAY_ENV.items():
                os.environ.setdefault(key, value)
            if self._session_record is not None:
                clean_stale_session(self._session_record)
            ray.init(address=ray_address, include_dashboard=False, logging_level=logging.WARNING)
            if ray_address is None:  # a local session this process started (and must not outlive it)
                self._session_name, self._raylet_pid = session_ids()
                if self._session_record is not None and self._session_name:
                    self._session_record.write_text(json.dumps(
                        {"driver_pid": os.getpid(), "session_name": self._session_name,
                         "raylet_pid": self._raylet_pid}) + "\n")
        self.placed: Optional[PlacedGroup] = None
        self.workers: list[Any] = []
        self._state_ref: Any = None  # the current weights in the object store (for replacements)
        try:
            if plan_for is not None:  # planned (and refused, if it cannot work) before any model loads
                from training.rollout.cluster import ClusterResources
                from training.rollout.placement_group import make_placement_group

                plan = plan_for(ClusterResources.from_ray())
                self.placed = make_placement_group(plan)
                device, num_gpus_per_worker = plan.worker_device, plan.gpus_per_worker
        except BaseException:
            self.close()
            raise
        if num_gpus_per_worker is None:
            gpus = 0.0 if device == "cpu" else float(ray.cluster_resources().get("GPU", 0.0))
            num_gpus_per_worker = min(1.0, gpus / num_workers)
        self.sampling = sampling
        self._spec = dict(model=model, scientist=scientist, lab_manager=lab_manager, sampling=sampling,
                          max_rounds=max_rounds, torch_threads=torch_threads_per_worker, device=device,
                          num_gpus=num_gpus_per_worker, frozen=frozen, chat_template=chat_template,
                          engine=engine, vllm=vllm, python=python)
        self.num_workers = num_workers
        self.max_restarts = max_restarts
        self.restarts = 0
        self.version = 0  # the checkpoint as loaded
        self._spawned = 0
        self.names: list[str] = []  # each slot's worker name (ray-K, K counting every worker started)
        self.pids: list[Optional[int]] = []  # each slot's OS process id, once it reported ready
        try:
            for slot in range(num_workers):
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
        worker = make_worker(name=name, options=options, **self._spec)
        if self._state_ref is not None:
            worker.set_weights.remote(self._state_ref, self.version)  # queued before any collect
        return worker, name

    def _wait_ready(self, workers: Sequence[Any]) -> list[dict[str, Any]]:
        import ray

        refs = [w.ready.remote() for w in workers]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=WORKER_READY_TIMEOUT_S)
        if len(ready) < len(refs):
            raise RuntimeError(f"rollout workers not ready after {WORKER_READY_TIMEOUT_S:.0f}s "
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
        """Put ``state`` (numpy arrays) into the object store once; every worker loads it.  A worker
        found dead (idle since the last call, or dying while it loads) is replaced; its replacement
        loads these weights before anything else."""
        import ray

        self._state_ref = ray.put(dict(state))
        self.version = version
        pending = {w.set_weights.remote(self._state_ref, version): slot for slot, w in enumerate(self.workers)}
        failures = 0
        while pending:
            (ref,), _ = ray.wait(list(pending), num_returns=1)
            slot = pending.pop(ref)
            try:
                got = ray.get(ref)
            except _worker_failures() as error:
                failures += 1
                during = f"while loading weights version {version}"
                self._replace(slot, error, during)
                if failures > self.max_restarts:
                    raise self._give_up(failures, error, during) from error
                pending[self.workers[slot].weights_version.remote()] = slot  # queued after its set_weights
                continue
            if got != version:
                raise RuntimeError(f"worker {self.names[slot]} reports weights version {got}, expected {version}")

    def collect(self, jobs: Sequence[EpisodeJob], *, sampling_seed: Optional[int] = None) -> list[RolloutRecord]:
        """Play ``jobs`` on the pool; one record per job, in job order, each job exactly once."""
        import ray

        check_unique_job_ids(jobs)
        shards = shard_jobs(jobs, self.num_workers) if jobs else []
        samplings = [shard_sampling(self.sampling, sampling_seed, slot) for slot in range(len(shards))]
        pending = {self.workers[slot].collect.remote(shard, samplings[slot]): slot
                   for slot, shard in enumerate(shards)}
        records: dict[int, RolloutRecord] = {}
        failures = 0
        while pending:
            (ref,), _ = ray.wait(list(pending), num_returns=1)
            slot = pending.pop(ref)
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
                pending[self.workers[slot].collect.remote(shards[slot], samplings[slot])] = slot
                continue
            self._absorb(shards[slot], shard_records, records)
        return _check_complete(jobs, records)

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
        self.workers = []
        self._state_ref = None
        placed, self.placed = self.placed, None
        if placed is not None and ray.is_initialized():
            placed.remove()
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()
        if self._session_name:  # what ray.shutdown left of the session this backend started
            left = kill_session_processes(self._session_name, self._raylet_pid)
            if left:
                logger.info("killed %d Ray processes left after shutdown", len(left))
            if self._session_record is not None:
                self._session_record.unlink(missing_ok=True)
            self._session_name = None


def _worker_failures() -> tuple[type[BaseException], ...]:
    """The Ray exceptions that mean "this worker is gone", as opposed to a bug in the episode code."""
    from ray import exceptions as rex

    names = ("RayActorError", "ActorDiedError", "ActorUnavailableError", "WorkerCrashedError")
    return tuple(getattr(rex, name) for name in names if hasattr(rex, name))
