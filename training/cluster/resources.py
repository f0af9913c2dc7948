"""The cluster a run is planned for: GPUs per node, their memory, CPUs (no torch; Ray only in ``from_ray``).

Node 0 is the driver's node, where the learner runs.  ``ClusterResources(gpus=8, gpu_memory_gib=80)``
describes a cluster by hand (tests, planning ahead); ``from_ray()`` reads the connected Ray cluster's
alive nodes; ``local()`` this machine's GPUs through ``nvidia-smi``.

``wait_for_nodes(address, n, timeout_s)`` is the launchers' readiness check: it waits until the Ray head
at ``address`` accepts connections and ``n`` nodes are alive, bounded, with one clear line on timeout.
``python -m training.cluster.resources --address HOST:PORT --nodes N --timeout S`` runs it (exit 0 when
ready, 1 with the message otherwise).
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Optional

from training.cluster.launcher import visible_gpu_ids
from training.errors import UserInputError

#: Seconds between two looks at the head's port and at the node list.
POLL_S = 2.0
#: Default Ray GCS port when an address names only a host.
DEFAULT_RAY_PORT = 6379


@dataclass(frozen=True)
class NodeResources:
    """One node's GPUs and CPUs (``cpus`` None: unknown, not checked)."""

    gpus: int
    cpus: Optional[float] = None


@dataclass(frozen=True)
class ClusterResources:
    """GPUs, their memory and nodes.  Node 0 is the driver's (the learner's) node.  Without
    ``per_node`` the GPUs and CPUs are split evenly over ``nodes``."""

    gpus: int
    gpu_memory_gib: Optional[float] = None
    nodes: int = 1
    cpus: Optional[float] = None
    per_node: tuple[NodeResources, ...] = ()
    accelerator: Optional[str] = None

    def __post_init__(self) -> None:
        if not self.per_node:
            if self.nodes < 1 or self.gpus % self.nodes:
                raise ValueError(f"{self.gpus} GPUs do not split evenly over {self.nodes} nodes; pass per_node")
            cpus = None if self.cpus is None else self.cpus / self.nodes
            object.__setattr__(self, "per_node", tuple(NodeResources(self.gpus // self.nodes, cpus)
                                                       for _ in range(self.nodes)))
        if len(self.per_node) != self.nodes or sum(n.gpus for n in self.per_node) != self.gpus:
            raise ValueError("per_node does not add up to nodes and gpus")

    @classmethod
    def from_ray(cls, gpu_memory_gib: Optional[float] = None) -> "ClusterResources":
        """The alive nodes of the connected Ray cluster, the driver's first.  GPU memory: the argument,
        else what ``nvidia-smi`` reports on this node, else unknown."""
        import ray

        me = ray.get_runtime_context().get_node_id()
        alive = sorted((n for n in ray.nodes() if n.get("Alive")), key=lambda n: n["NodeID"] != me)
        per_node = tuple(NodeResources(int(n["Resources"].get("GPU", 0)), float(n["Resources"].get("CPU", 0)))
                         for n in alive)
        kinds = sorted({k.split(":", 1)[1] for n in alive for k in n["Resources"] if k.startswith("accelerator_type:")})
        return cls(gpus=sum(n.gpus for n in per_node), nodes=len(per_node), per_node=per_node,
                   cpus=sum(n.cpus or 0 for n in per_node), accelerator=",".join(kinds) or None,
                   gpu_memory_gib=gpu_memory_gib if gpu_memory_gib is not None else local_gpu_memory_gib())

    @classmethod
    def local(cls, gpu_memory_gib: Optional[float] = None) -> "ClusterResources":
        """This machine alone: the GPUs ``nvidia-smi`` lists (restricted by ``CUDA_VISIBLE_DEVICES``)."""
        listed = _nvidia_smi("memory.total")
        visible = visible_gpu_ids()
        gpus = len(listed) if visible is None else min(len(listed), len(visible))
        memory = gpu_memory_gib if gpu_memory_gib is not None else (min(listed) / 1024 if listed else None)
        return cls(gpus=gpus, gpu_memory_gib=memory, cpus=float(os.cpu_count() or 1))

    def describe(self) -> str:
        mem = f" ({self.gpu_memory_gib:.0f} GiB each)" if self.gpu_memory_gib else " (memory unknown)"
        kind = f" {self.accelerator}" if self.accelerator else ""
        cpus = f", {self.cpus:g} CPUs" if self.cpus is not None else ""
        layout = "+".join(str(n.gpus) for n in self.per_node)
        return f"{self.nodes} node(s), {self.gpus}{kind} GPUs [{layout}]{mem}{cpus}"


def _nvidia_smi(query: str) -> list[float]:
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [float(x) for x in out.split() if x.replace(".", "", 1).isdigit()]


def local_gpu_memory_gib() -> Optional[float]:
    """The smallest GPU memory on this node in GiB (``nvidia-smi``), None without one."""
    listed = _nvidia_smi("memory.total")
    return min(listed) / 1024 if listed else None


def _reachable(address: str) -> bool:
    host, _, port = address.rpartition(":") if ":" in address else (address, "", str(DEFAULT_RAY_PORT))
    try:
        with socket.create_connection((host, int(port)), timeout=POLL_S):
            return True
    except (OSError, ValueError):
        return False


def wait_for_nodes(address: str, expected: int, timeout_s: float, *, poll_s: float = POLL_S) -> int:
    """Wait until the Ray cluster at ``address`` (host:port of the head, or ``auto`` from inside the
    cluster, e.g. a Ray job's entrypoint) has ``expected`` alive nodes;
    return how many are alive.  ``UserInputError`` after ``timeout_s`` says how many joined.  The head's
    port is probed first: ``ray.init`` against a head that is not up yet hangs for minutes."""
    import ray

    deadline = time.monotonic() + timeout_s
    while address != "auto" and not _reachable(address):  # "auto": this process runs inside the cluster
        if time.monotonic() > deadline:
            raise UserInputError(f"the Ray head at {address} did not accept connections within {timeout_s:g}s; "
                                 "check that `ray start --head` ran on that node and the port is open")
        time.sleep(poll_s)
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, logging_level=logging.WARNING)
    alive = 0
    while True:
        alive = sum(1 for n in ray.nodes() if n.get("Alive"))
        if alive >= expected:
            return alive
        if time.monotonic() > deadline:
            raise UserInputError(f"only {alive} of {expected} Ray nodes joined {address} within {timeout_s:g}s; "
                                 "check the `ray start --address` logs of the missing nodes")
        time.sleep(poll_s)


def main(argv: Optional[list[str]] = None) -> int:
    """Readiness check for launchers: exit 0 when the nodes are alive, 1 with one line otherwise."""
    ap = argparse.ArgumentParser(prog="python -m training.cluster.resources", description=main.__doc__)
    ap.add_argument("--address", required=True, help="the Ray head, host:port")
    ap.add_argument("--nodes", type=int, required=True, help="nodes that must be alive (head included)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds to wait at most")
    args = ap.parse_args(argv)
    try:
        alive = wait_for_nodes(args.address, args.nodes, args.timeout)
    except UserInputError as error:
        print(f"{ap.prog}: {error}", file=sys.stderr)
        return 1
    print(f"ray: {alive} node(s) alive at {args.address}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
