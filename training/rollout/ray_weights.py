"""What every worker of a ``RayBackend`` holds -- the policy's weights (with their version) and the frozen
snapshots -- and how it reaches them.

Weights go over a collective (``pool.weight_sync="collective"``, ``CollectiveSync``: the model's dtype, in
buckets, the driver as rank 0 of a group with every worker) or through the object store (put once per version as
float32 numpy arrays, every worker loads them; the fallback, and what a replacement worker and a failed collective
transfer get).  Snapshots go through the object store (each put once).  A worker that dies meanwhile is replaced
(``WorkerSlots.drain``) and its replacement loads what the others hold.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Mapping, Optional, Sequence

from training.rollout.collective_sync import CollectiveSync, CollectiveUnavailable
from training.rollout.ray_workers import WorkerSlots

logger = logging.getLogger(__name__)


class WorkerWeights:
    """The weights (``version``: 0 for the checkpoint as loaded) and snapshots every worker of a ``WorkerSlots``
    holds; ``sync``: the weight-sync group (None: the object store only)."""

    def __init__(self, sync: Optional[CollectiveSync]) -> None:
        self.sync = sync
        self.version = 0
        self._state: Optional[dict[str, Any]] = None  # the current weights, as given to ``load``
        self._state_ref: Any = None  # the current weights in the object store (put when a worker needs them)
        self._snapshot_refs: dict[str, Any] = {}  # the frozen snapshots in the object store, by name

    def set_up(self, worker: Any) -> None:
        """Queue on a new worker what the others hold: the weights (object store), then the snapshots."""
        if self._state is not None:
            worker.set_weights.remote(self._current_ref(), self.version)
        if self._snapshot_refs:
            self._send_snapshots(worker)

    def load(self, slots: WorkerSlots, state: Mapping[str, Any], version: int) -> None:
        """Every worker loads ``state`` (tensors or numpy arrays) and tags later records ``version``: over the
        weight-sync group, else through the object store (put once).  A worker found dead (idle since the last
        call, or dying while it loads) is replaced; its replacement loads these weights (object store) before
        anything else; a worker whose collective receive failed gets them through the object store too.
        ``state`` must stay unchanged until the next ``load`` (replacements read it)."""
        self._state, self._state_ref, self.version = dict(state), None, version
        during = f"while loading weights version {version}"
        by_store = list(range(len(slots.workers)))
        if self.sync is not None:
            by_store = self._sync_collective(slots, version, during)
        if by_store:
            self._broadcast(slots, lambda w: w.set_weights.remote(self._current_ref(), version), version, during,
                            only=by_store)

    def _current_ref(self) -> Any:
        """The current weights in the object store (float32 numpy arrays, tied ones once), put on first need."""
        import ray

        from training.rollout.sync_wire import numpy_payload

        if self._state_ref is None:
            self._state_ref = ray.put(numpy_payload(self._state or {}, tied_once=True))
        return self._state_ref

    def _sync_collective(self, slots: WorkerSlots, version: int, during: str) -> list[int]:
        """Send the current weights over the weight-sync group (formed again if its members changed); return the
        slots the object store must still serve.  A group that cannot form while every worker is alive turns the
        collective off for good (one warning)."""
        import ray

        everyone = list(range(len(slots.workers)))
        try:
            self.sync.ensure_group(slots.workers, slots.names, self.sync.backend_for(self._state, slots.spec.device))
        except CollectiveUnavailable as error:
            restarts = slots.restarts
            self._broadcast(slots, _ping, None, during, check=False)  # replaces a worker that died meanwhile
            if slots.restarts == restarts:  # no dead worker explains it
                logger.warning("%s; weights go through the object store from now on", error)
                self.sync = None
            return everyone
        pending, _ = self.sync.push(slots.workers, self._state, version)
        fallback: list[int] = []
        replaced: list[int] = []

        def redo(slot: int) -> None:  # the replacement loads the weights from the object store
            replaced.append(slot)

        results = slots.drain(pending, during, redo, keep=(ray.exceptions.RayTaskError,))
        for slot, got in results:
            if isinstance(got, ray.exceptions.RayTaskError):  # its receive failed with the group: the store serves it
                logger.warning("worker %s did not receive weights version %d over the group (%s)",
                               slots.names[slot], version, type(got.cause).__name__)
                fallback.append(slot)
            elif got != version:
                raise RuntimeError(f"worker {slots.names[slot]} reports {got} {during}, expected {version}")
        if fallback or replaced:
            self.sync.drop_group()
        if replaced:
            self._broadcast(slots, _ping, version, during, only=replaced)
        return fallback

    def load_snapshots(self, slots: WorkerSlots, snapshots: Mapping[str, Mapping[str, Any]]) -> None:
        """Every worker holds exactly these frozen snapshots (each put into the object store once, when new); a
        replacement worker loads them after the weights."""
        import ray

        self._snapshot_refs = {name: self._snapshot_refs.get(name) or ray.put(dict(state))
                               for name, state in snapshots.items()}
        names = sorted(self._snapshot_refs)
        self._broadcast(slots, self._send_snapshots, names, f"while loading snapshots {names}",
                        confirm=self._send_snapshots)

    def _send_snapshots(self, worker: Any) -> Any:
        names = sorted(self._snapshot_refs)
        return worker.set_snapshots.remote(names, *(self._snapshot_refs[n] for n in names))

    def _broadcast(self, slots: WorkerSlots, call: Callable[[Any], Any], expected: Any, during: str, *,
                   only: Optional[Sequence[int]] = None, check: bool = True,
                   confirm: Optional[Callable[[Any], Any]] = None) -> None:
        """``call(worker)`` on every worker (of the slots ``only``), each result checked against ``expected``
        (unless not ``check``); a worker that dies is replaced (its replacement is set up by ``set_up``), then
        ``confirm(worker)`` (default: ``_ping``) asks it again."""
        confirm = confirm or _ping
        pending = {call(slots.workers[slot]): slot for slot in (range(len(slots.workers)) if only is None else only)}
        for slot, got in slots.drain(pending, during, lambda slot: confirm(slots.workers[slot])):
            if check and got != expected:
                raise RuntimeError(f"worker {slots.names[slot]} reports {got} {during}, expected {expected}")

    def close(self) -> None:
        """Forget the weights and leave the weight-sync group."""
        self._state, self._state_ref = None, None
        if self.sync is not None:
            self.sync.drop_group()


def _ping(worker: Any) -> Any:
    """Ask ``worker`` which weights version it holds (after everything queued before)."""
    return worker.weights_version.remote()
