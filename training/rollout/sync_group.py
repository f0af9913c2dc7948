"""The weight-sync process group: the learner's main process (rank 0, the source) and the rollout workers
(ranks 1..N) in a torch.distributed group of their own, and the bucketed broadcast over it.

The group is separate from any group the learner's own processes form (torchrun/accelerate): it is built
directly on a ``TCPStore`` the source hosts (``SyncStore``), one ``PrefixStore`` per ``generation`` so that a
re-formed group (after a worker was replaced) never meets the keys of an old one.  Backend: ``gloo`` (CPU
tensors; the source stages GPU weights through host memory) or ``nccl`` (CUDA tensors on both sides).

``send_weights`` (source) and ``receive_weights`` (every other rank) walk the same ``WeightLayout``: one
broadcast per bucket, the bucket buffer reused, so a sync holds one bucket beside the weights on either side.
A member that dies makes the broadcast fail on every member (gloo closes the connections at once; NCCL after
the group's timeout).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Optional

import torch
import torch.distributed as dist

from training.rollout.sync_wire import Unpacker, WeightLayout, fill_bucket

#: The collective backends a weight-sync group can use.
SYNC_BACKENDS = ("gloo", "nccl")
#: Key prefix of a group generation in the source's store.
STORE_PREFIX = "replicalab-weight-sync"


@dataclass(frozen=True)
class GroupAddress:
    """How a member joins generation ``generation`` of a weight-sync group of ``world_size`` ranks."""

    host: str
    port: int
    generation: int
    world_size: int
    backend: str = "gloo"
    timeout_s: float = 120.0


class SyncStore:
    """The ``TCPStore`` the source hosts for every generation of its group (free port, all interfaces)."""

    def __init__(self, host: str, timeout_s: float) -> None:
        self.host = host
        self.store = dist.TCPStore(host, 0, None, True, timeout=datetime.timedelta(seconds=timeout_s),
                                   wait_for_workers=False)
        self.port = int(self.store.port)

    def address(self, generation: int, world_size: int, backend: str, timeout_s: float) -> GroupAddress:
        return GroupAddress(self.host, self.port, generation, world_size, backend, timeout_s)


def join_group(address: GroupAddress, rank: int, store: Optional[Any] = None) -> Any:
    """This process's member (rank ``rank``) of the group at ``address``; blocks until every rank joined.
    ``store``: the source's own ``TCPStore`` (members connect to it as clients)."""
    if address.backend not in SYNC_BACKENDS:
        raise ValueError(f"weight-sync backend {address.backend!r}; valid: {', '.join(SYNC_BACKENDS)}")
    timeout = datetime.timedelta(seconds=address.timeout_s)
    if store is None:
        store = dist.TCPStore(address.host, address.port, None, False, timeout=timeout)
    prefixed = dist.PrefixStore(f"{STORE_PREFIX}/{address.generation}", store)
    if address.backend == "gloo":
        return dist.ProcessGroupGloo(prefixed, rank, address.world_size, timeout)
    nccl = getattr(dist, "ProcessGroupNCCL", None)
    if nccl is None or not torch.cuda.is_available():
        raise RuntimeError("weight-sync backend nccl needs a CUDA build of torch and a GPU")
    options = nccl.Options()
    options._timeout = timeout
    return nccl(prefixed, rank, address.world_size, options)


def _broadcast(group: Any, tensor: torch.Tensor) -> None:
    options = dist.BroadcastOptions()
    options.rootRank = 0
    group.broadcast([tensor], options).wait()


def bucket_device(backend: str, device: torch.device) -> torch.device:
    """Where a member's bucket buffer lives: host memory for gloo, the member's GPU for nccl."""
    return device if backend == "nccl" else torch.device("cpu")


def send_weights(group: Any, state: Mapping[str, Any], layout: WeightLayout, device: torch.device) -> None:
    """Broadcast ``state`` bucket by bucket (rank 0), a ``layout.bucket_bytes`` buffer on ``device``."""
    buffer = torch.empty(min(layout.bucket_bytes, layout.total_bytes), dtype=torch.uint8, device=device)
    for index in range(layout.num_buckets):
        _broadcast(group, fill_bucket(state, layout, index, buffer))


def receive_weights(group: Any, layout: WeightLayout, device: torch.device) -> Iterator[tuple[str, torch.Tensor]]:
    """Receive the buckets of ``layout`` (ranks 1..N) and yield each tensor once complete, in the source's
    dtype and shape.  A yielded tensor may be a view into the bucket buffer: use it (copy it out) before
    asking for the next one."""
    buffer = torch.empty(min(layout.bucket_bytes, layout.total_bytes), dtype=torch.uint8, device=device)
    unpacker = Unpacker(layout)
    for index in range(layout.num_buckets):
        lo, hi = layout.bucket_span(index)
        bucket = buffer[:hi - lo]
        _broadcast(group, bucket)
        yield from unpacker.take(index, bucket)
