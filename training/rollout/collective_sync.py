"""``CollectiveSync``: the driver's side of the collective weight sync (``rollout.weight_sync=collective``).

The driver (the learner's main process) is rank 0 of a weight-sync group with every Ray rollout worker
(``training.rollout.sync_group``).  Each ``set_weights`` lays the payload out in buckets
(``training.rollout.sync_wire``: the model's dtype, tied tensors once, a LoRA run's adapter only), starts
``receive_weights`` on every worker and broadcasts the buckets; every worker loads its policy as the tensors
arrive (``load_stream``: in place for the hf engine, vLLM's ``reload_weights`` for vllm).  Frozen snapshots
are not members of anything here: they only ever load what ``set_snapshots`` gives them.

The group's members are the workers it was formed with; after a worker is replaced (or a transfer failed)
the next sync forms a new group (a new generation) with the workers of that moment.  What a failed transfer
leaves to do, ``RayBackend`` does through the object store (the replacement of a dead worker, and every
worker whose receive failed), so a sync ends, as before, with every worker on the new version.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

if TYPE_CHECKING:  # torch is imported when a sync runs: the driver imports this module cheaply
    from training.rollout.sync_wire import WeightLayout

logger = logging.getLogger(__name__)

#: The ways weights reach the rollout workers (``rollout.weight_sync``).
WEIGHT_SYNCS = ("collective", "object_store")
#: Default bucket size of the collective (``rollout.weight_sync_bucket_mib``).
DEFAULT_BUCKET_MIB = 256
MIB = 1 << 20


class CollectiveUnavailable(RuntimeError):
    """The weight-sync group could not be formed."""


class CollectiveSync:
    """Rank 0 of the weight-sync group: buckets of ``bucket_mib`` MiB, collectives bounded by ``timeout_s``."""

    def __init__(self, *, bucket_mib: int, timeout_s: float) -> None:
        self.bucket_bytes = bucket_mib * MIB
        self.timeout_s = timeout_s
        self.members: list[str] = []  # the worker names of the current group (empty: no group)
        self.generation = 0
        self.last_layout: Optional["WeightLayout"] = None
        self._store: Any = None  # the SyncStore every generation of the group meets at
        self._group: Any = None
        self._backend = ""

    def backend_for(self, state: Mapping[str, Any], worker_device: str) -> str:
        """``nccl`` when the weights and the workers are on GPUs (and torch has NCCL), else ``gloo``."""
        import torch

        tensors = [v for v in state.values() if isinstance(v, torch.Tensor)]
        on_gpu = bool(tensors) and tensors[0].is_cuda and worker_device.startswith("cuda")
        return "nccl" if on_gpu and torch.distributed.is_nccl_available() else "gloo"

    def ensure_group(self, workers: Sequence[Any], names: Sequence[str], backend: str) -> None:
        """Form a new group with ``workers`` unless the current one has exactly these members and backend."""
        import ray

        from training.rollout.sync_group import SyncStore, join_group

        if self._group is not None and list(names) == self.members and backend == self._backend:
            return
        self.drop_group()
        if self._store is None:
            self._store = SyncStore(ray.util.get_node_ip_address(), self.timeout_s)
        self.generation += 1
        address = self._store.address(self.generation, len(workers) + 1, backend, self.timeout_s)
        joined = [w.join_sync_group.remote(address, rank) for rank, w in enumerate(workers, start=1)]
        try:
            group = join_group(address, 0, store=self._store.store)
            ray.get(joined, timeout=self.timeout_s)
        except Exception as error:
            raise CollectiveUnavailable(f"weight-sync group generation {self.generation} ({backend}, "
                                        f"{len(workers) + 1} ranks) did not form: {type(error).__name__}: "
                                        + " ".join(str(error).split())[:200]) from error
        self._group, self.members, self._backend = group, list(names), backend
        logger.info("weight-sync group generation %d formed: %s, %d workers", self.generation, backend, len(workers))

    def push(self, workers: Sequence[Any], state: Mapping[str, Any], version: int) -> tuple[dict[Any, int], bool]:
        """Start ``receive_weights`` on every worker and broadcast ``state``'s buckets.  Returns the receive
        calls (ref -> slot) and whether the broadcast itself went through (if not, the group is dropped)."""
        from training.rollout.sync_wire import as_tensor, plan_layout
        from training.rollout.sync_group import bucket_device, send_weights

        layout = plan_layout(state, self.bucket_bytes)
        self.last_layout = layout
        refs = {w.receive_weights.remote(layout, version): slot for slot, w in enumerate(workers)}
        tensors = {name: as_tensor(value) for name, value in state.items() if name in _sent(layout)}
        try:
            send_weights(self._group, tensors, layout, bucket_device(self._backend, _device_of(tensors)))
        except Exception as error:  # a member died: every member's broadcast fails
            logger.warning("weight sync of version %d broke off (%s: %s); the group will be formed again",
                           version, type(error).__name__, " ".join(str(error).split())[:200])
            self.drop_group()
            return refs, False
        return refs, True

    def drop_group(self) -> None:
        self._group, self.members = None, []


def _sent(layout: "WeightLayout") -> set[str]:
    return {entry.name for entry in layout.entries}


def _device_of(tensors: Mapping[str, Any]) -> Any:
    import torch

    return next(iter(tensors.values())).device if tensors else torch.device("cpu")
