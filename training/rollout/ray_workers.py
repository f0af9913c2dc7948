"""The Ray ``RolloutWorker`` actors of a ``RayBackend``, one per slot, and their fault handling.

``WorkerSlots`` starts the workers (in the run's placement group when it is placed), replaces a dead one (what
it must hold queued on the replacement before anything else) and ``drain``\\ s a set of calls: the one loop that
waits for the workers, replaces those found dead, has their calls made again and gives up after
``max_restarts`` deaths (``training.rollout.contract``'s fault contract).
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterator, Optional, Sequence

from training.cluster.placement_group import PlacedGroup
from training.rollout.contract import RolloutSpec, WorkerFailure

logger = logging.getLogger(__name__)

#: The Ray exceptions that mean "this worker is gone", as opposed to a bug in the episode code.
WORKER_FAILURES = ("RayActorError", "ActorDiedError", "ActorUnavailableError", "WorkerCrashedError")
#: Characters of the last error a give-up message quotes.
GIVE_UP_QUOTE_CHARS = 300


class WorkerSlots:
    """Ray ``RolloutWorker`` actors playing ``spec``, slot ``i``'s in bundle ``i`` of ``placed`` (when the run is
    placed), each with ``threads`` torch threads, ``num_gpus`` GPUs and the interpreter ``python``;
    ``set_up(worker)`` queues on every new worker what it must hold before any call (weights, snapshots).
    ``workers[i]``, ``names[i]`` (``ray-K``, K counting every worker started) and ``pids[i]`` (its OS process id,
    once it reported ready) describe slot ``i``; ``restarts`` counts workers replaced so far."""

    def __init__(self, spec: RolloutSpec, *, num_gpus: float, threads: int, python: Optional[str],
                 placed: Optional[PlacedGroup], max_restarts: int, ready_timeout_s: float,
                 set_up: Callable[[Any], None]) -> None:
        self.spec = spec
        self.num_gpus = num_gpus
        self.threads = threads
        self.python = python
        self.placed = placed
        self.max_restarts = max_restarts
        self.ready_timeout_s = ready_timeout_s
        self.set_up = set_up
        self.workers: list[Any] = []
        self.names: list[str] = []
        self.pids: list[Optional[int]] = []
        self.restarts = 0
        self._spawned = 0

    def start(self, count: int) -> None:
        """Start ``count`` workers, one per slot, and wait until every one is ready (``RuntimeError`` after
        ``ready_timeout_s``).  On an error the workers started so far stay in ``workers`` for ``kill``."""
        for slot in range(count):
            worker, name = self._spawn(slot)
            self.workers.append(worker)
            self.names.append(name)
        self.pids = [info["pid"] for info in self._wait_ready(self.workers)]

    def _spawn(self, slot: int) -> tuple[Any, str]:
        """A new worker for ``slot`` (in the slot's placement-group bundle when the run is placed), set up."""
        from training.rollout.worker import make_worker

        self._spawned += 1
        name = f"ray-{self._spawned - 1}"
        options = self.placed.worker_options(slot) if self.placed is not None else None
        worker = make_worker(self.spec, name=name, torch_threads=self.threads, num_gpus=self.num_gpus,
                             options=options, python=self.python)
        self.set_up(worker)  # queued before any other call
        return worker, name

    def _wait_ready(self, workers: Sequence[Any]) -> list[dict[str, Any]]:
        import ray

        refs = [w.ready.remote() for w in workers]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=self.ready_timeout_s)
        if len(ready) < len(refs):
            raise RuntimeError(f"rollout workers not ready after {self.ready_timeout_s:.0f}s (rollout.ready_timeout_s) "
                               f"(too few free CPUs/GPUs in the Ray cluster for {len(refs)} workers?)")
        return ray.get(refs)

    def replace(self, slot: int, error: BaseException, during: str) -> None:
        """Replace the dead worker of ``slot`` by a fresh one (its set-up queued first)."""
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

    def drain(self, pending: dict[Any, int], during: str, redo: Callable[[int], Optional[Any]], *,
              keep: tuple[type[BaseException], ...] = (),
              died: Optional[Callable[[int], str]] = None) -> Iterator[tuple[int, Any]]:
        """Wait for every call of ``pending`` (its result ref -> the slot running it; emptied as they finish) and
        yield ``(slot, result)`` as each finishes; an exception of ``keep`` is yielded as the result.  A worker
        found dead is replaced (``died(slot)``, else ``during``, says what it was doing), then ``redo(slot)``
        makes the call again on the replacement and returns its ref (None: nothing to wait for).  More than
        ``max_restarts`` deaths in one drain raise ``WorkerFailure`` (``during`` says in what)."""
        import ray

        failures = 0
        while pending:
            (ref,), _ = ray.wait(list(pending), num_returns=1)
            slot = pending.pop(ref)
            try:
                got = ray.get(ref)
            except _worker_failures() as error:
                failures += 1
                self.replace(slot, error, died(slot) if died is not None else during)
                if failures > self.max_restarts:
                    raise self._give_up(failures, error, during) from error
                again = redo(slot)
                if again is not None:
                    pending[again] = slot  # queued after the replacement's set-up
                continue
            except keep as error:
                got = error
            yield slot, got

    def _give_up(self, failures: int, error: BaseException, during: str) -> WorkerFailure:
        return WorkerFailure(f"rollout gave up: {failures} worker failures {during} "
                             f"(rollout.max_worker_restarts={self.max_restarts}); last: {type(error).__name__}: "
                             + " ".join(str(error).split())[:GIVE_UP_QUOTE_CHARS])

    def kill(self) -> None:
        """Kill every worker (those already gone too); ``workers`` is then empty."""
        import ray

        for worker in self.workers:
            try:
                ray.kill(worker, no_restart=True)
            except Exception:  # already gone
                pass
        self.workers = []


def _worker_failures() -> tuple[type[BaseException], ...]:
    """The exception classes of ``WORKER_FAILURES`` this Ray has."""
    from ray import exceptions as rex

    return tuple(getattr(rex, name) for name in WORKER_FAILURES if hasattr(rex, name))
