"""Placement: which process holds which GPUs, planned before anything loads, then reserved in Ray.

``plan_placement(cfg, cluster, ...)`` resolves ``cfg.placement`` against the cluster's resources into a
``PlacementPlan``: the learner's processes on GPUs ``0..k-1`` of the driver's node (one GPU each), every
rollout worker's GPU share, CPUs and model copies, and the estimated memory on every GPU
(``training.cluster.memory``).  A layout that cannot work -- more GPU shares than GPUs, a worker Ray
could not place under the strategy, too few CPUs, a GPU whose estimate exceeds its memory -- raises
``UserInputError`` with one line that names the arithmetic and a fix.  ``training.cluster.plan_table.render_plan``
is the pre-flight table; ``replicalab preflight --config FILE [KEY=VALUE ...]`` prints it
(``training.cluster.preflight``: the model's size from its config.json, the cluster from Ray or by hand), and
``training.cluster.placement_group.make_placement_group`` reserves the plan in Ray.

The unit is one GPU *device*: Ray never splits a bundle's share over two devices, so workers of share
``g <= 1`` fit ``floor(1/g)`` to a GPU; a share above 1 is refused (a worker's engine runs on one GPU: no tensor
parallelism).  vLLM engines sharing a GPU may book at most all of it (``rollout.vllm.gpu_memory_utilization``).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Optional

from replicalab.seats import MODEL_PREFIX
from training.cluster.memory import (
    DTYPE_BYTES,
    GIB,
    LORA_TRAINABLE_FRACTION,
    SHIPPED_BYTES_PER_PARAM,
    MemoryEstimate,
    ModelShape,
    ceil_div,
    context_tokens,
    learner_memory,
    rollout_kv_gib,
    worker_memory,
)
from training.cluster.resources import ClusterResources
from training.config.placement import AUTO
from training.config.pool import SNAPSHOT
from training.config.train import TrainConfig
from training.errors import UserInputError

logger = logging.getLogger(__name__)

#: Float slack when fitting GPU shares onto a device.
SHARE_EPS = 1e-6
LEARNER, ROLLOUT = "learner", "rollout"


@dataclass(frozen=True)
class ProcessPlacement:
    """One process of the run: where it sits and what it holds on each of its GPUs."""

    name: str
    role: str  # LEARNER or ROLLOUT
    node: int
    gpus: tuple[int, ...]  # device indices on its node (empty: CPU)
    gpu_share: float  # of each listed GPU Ray reserves for it
    cpus: float
    model_copies: int
    memory: Optional[MemoryEstimate]  # per GPU; None when unknown or on CPU


@dataclass(frozen=True)
class GpuLoad:
    """One GPU device: who holds it, the Ray share reserved, the estimated memory (None: unknown)."""

    node: int
    gpu: int
    holders: tuple[str, ...]
    reserved: float
    memory_gib: Optional[float]


@dataclass(frozen=True)
class PlacementPlan:
    """The resolved layout of a run (see the module docstring)."""

    cluster: ClusterResources
    strategy: str
    backend: str
    max_wait_s: float
    trainer_gpus: int
    gpus_per_worker: float
    cpus_per_worker: float
    learners: tuple[ProcessPlacement, ...]
    workers: tuple[ProcessPlacement, ...]
    gpu_loads: tuple[GpuLoad, ...]
    params: Optional[int]
    dtype_bytes: int
    lora: bool
    sharded: bool
    weights_gib: Optional[float]
    object_store_gib: Optional[float]
    notes: tuple[str, ...] = field(default=())
    learner_dtype_bytes: Optional[int] = None  # the learner's weights per parameter (``dtype``); None: dtype_bytes

    @property
    def worker_device(self) -> str:
        """The torch device of the rollout workers: cuda when they hold a GPU share, else cpu."""
        return "cuda" if self.gpus_per_worker > 0 else "cpu"

    def trainer_bundle(self) -> Optional[dict[str, float]]:
        """The learner's reservation (None when it holds no GPU)."""
        return {"GPU": float(self.trainer_gpus)} if self.trainer_gpus else None

    def worker_bundle(self) -> Optional[dict[str, float]]:
        """One rollout worker's reservation (None when it reserves nothing)."""
        bundle = {k: float(v) for k, v in (("GPU", self.gpus_per_worker), ("CPU", self.cpus_per_worker)) if v > 0}
        return bundle or None


def amount(x: float) -> str:
    """A count of GPUs or CPUs as the plan's messages print it (``0.5``, ``2``)."""
    return f"{x:g}"


def _resolve_trainer_gpus(cfg: TrainConfig, cluster: ClusterResources, processes: int) -> int:
    p, on_cpu = cfg.placement, cfg.device == "cpu"
    k = (0 if on_cpu or cluster.gpus == 0 else processes) if p.trainer_gpus == AUTO else int(p.trainer_gpus)
    if k and on_cpu:
        raise UserInputError(f"placement.trainer_gpus={k} but device=cpu; set placement.trainer_gpus=0 or device=cuda")
    if not k and cfg.device == "cuda":
        have = f"the cluster has {cluster.gpus} GPUs" if cluster.gpus else "the cluster has no GPU"
        raise UserInputError(f"device=cuda but the learner holds no GPU ({have}); set placement.trainer_gpus=1 or device=cpu")
    if k and k != processes:
        raise UserInputError(f"placement.trainer_gpus={k} but the learner runs {processes} process(es), one GPU each; "
                      f"launch with torchrun --nproc_per_node {k} (or accelerate launch --num_processes {k}) "
                      f"or set placement.trainer_gpus={processes}")
    head = cluster.per_node[0].gpus
    if k > head:
        raise UserInputError(f"placement.trainer_gpus={k} but the driver's node has {head} GPUs (the learner runs on "
                      f"one node); set placement.trainer_gpus={head} or less")
    return k


def _resolve_worker_gpus(cfg: TrainConfig, cluster: ClusterResources, k: int, n: int) -> float:
    p, free = cfg.placement, cluster.gpus - k
    if p.gpus_per_worker != AUTO:
        g = float(p.gpus_per_worker)
        if g and cfg.device == "cpu":
            raise UserInputError(f"placement.gpus_per_worker={amount(g)} but device=cpu; set placement.gpus_per_worker=0")
        if g > 1:
            raise UserInputError(f"placement.gpus_per_worker={amount(g)}: a rollout worker's engine runs on one GPU "
                                 f"(no tensor parallelism), so {amount(g - 1)} of its GPUs would sit idle; set "
                                 "placement.gpus_per_worker=1 (or a fraction) and more rollout.num_workers")
        return g
    if not n or cfg.device == "cpu" or cluster.gpus == 0:
        return 0.0
    if free <= 0:
        raise UserInputError(f"{n} rollout workers want GPUs but the learner's {k} GPU(s) are all the cluster has; "
                      "set rollout.backend=inprocess (episodes on the learner's GPU) or placement.gpus_per_worker=0 "
                      "(CPU workers), or add GPUs")
    per_gpu = ceil_div(n, free)
    return 1.0 if per_gpu == 1 else 1.0 / per_gpu


def _devices_needed(n: int, g: float) -> int:
    """GPU devices ``n`` workers of share ``g`` occupy (whole devices: a share never spans two)."""
    if g <= 0 or n == 0:
        return 0
    if g <= 1:
        return ceil_div(n, int(math.floor(1 / g + SHARE_EPS)))
    return n * int(g)


def _workers_that_fit(free: int, g: float) -> int:
    return free * int(math.floor(1 / g + SHARE_EPS)) if g <= 1 else free // int(g)


def _check_gpu_arithmetic(n: int, g: float, k: int, cluster: ClusterResources) -> None:
    need = _devices_needed(n, g)
    if need + k <= cluster.gpus:
        return
    free = cluster.gpus - k
    per = "" if g >= 1 or abs(1 / g - round(1 / g)) < SHARE_EPS else f" ({int(1 // g)} per GPU: {need} GPUs)"
    head = (f"{n} rollout workers x {amount(g)} GPU{per} + {k} trainer GPU(s) = {need + k} GPUs, "
            f"the cluster has {cluster.gpus}")
    fixes = []
    if _workers_that_fit(free, g) > 0:
        fixes.append(f"rollout.num_workers={_workers_that_fit(free, g)}")
    if free > 0:
        fixes.append(f"placement.gpus_per_worker={amount(1 / ceil_div(n, free))}")
    else:
        fixes.append("rollout.backend=inprocess")
    raise UserInputError(f"{head}; set {' or '.join(fixes)}")


def _candidate_nodes(strategy: str, slot: int, nodes: int, first_worker_node: int) -> list[int]:
    order = list(range(nodes))
    if strategy == "SPREAD":
        start = (slot + first_worker_node) % nodes
        return order[start:] + order[:start]
    if strategy == "STRICT_SPREAD":
        target = slot + first_worker_node
        return [target] if target < nodes else []
    if strategy == "STRICT_PACK":
        return [0]
    return order


def _simulate(cfg: TrainConfig, cluster: ClusterResources, k: int, n: int, g: float,
              c: float) -> list[tuple[int, tuple[int, ...]]]:
    """Where each worker lands (node, device indices) under the strategy, as Ray would place it."""
    strategy = cfg.placement.strategy
    free = [[1.0] * node.gpus for node in cluster.per_node]
    cpus = [math.inf if node.cpus is None else node.cpus for node in cluster.per_node]
    for d in range(k):
        free[0][d] = 0.0
    first = 1 if k else 0  # the learner's bundle sits on node 0: spreading starts after it
    placed: list[tuple[int, tuple[int, ...]]] = []
    for slot in range(n):
        for node in _candidate_nodes(strategy, slot, cluster.nodes, first):
            if cpus[node] + SHARE_EPS < c:
                continue
            if g <= 0:
                devices: tuple[int, ...] = ()
            elif g <= 1:
                devices = next(((d,) for d, f in enumerate(free[node]) if f + SHARE_EPS >= g), ())
            else:
                whole = [d for d, f in enumerate(free[node]) if f >= 1 - SHARE_EPS]
                devices = tuple(whole[:int(g)]) if len(whole) >= g else ()
            if g > 0 and not devices:
                continue
            for d in devices:
                free[node][d] -= min(g, 1.0)
            cpus[node] -= c
            placed.append((node, devices))
            break
        else:
            raise UserInputError(_unplaced(cluster, strategy, slot, n, g, c, free, cpus))
    return placed


def _nice_floor(x: float) -> float:
    """``x`` rounded down to a value worth typing (whole, quarters, hundredths)."""
    return math.floor(x) if x >= 1 else math.floor(x * 4) / 4 if x >= 0.25 else math.floor(x * 100) / 100


def _unplaced(cluster: ClusterResources, strategy: str, slot: int, n: int, g: float, c: float,
              free: list[list[float]], cpus: list[float]) -> str:
    """Why rollout worker ``slot`` found no node, with the fix, in one line."""
    if cluster.cpus is not None and n * c > cluster.cpus + SHARE_EPS:
        fit = int((cluster.cpus + SHARE_EPS) // c)
        return (f"{n} rollout workers x {amount(c)} CPUs = {amount(n * c)} CPUs, the cluster has {amount(cluster.cpus)}; "
                f"set placement.cpus_per_worker={amount(_nice_floor(cluster.cpus / n))} or rollout.num_workers={fit}")
    whole = [sum(f >= 1 - SHARE_EPS for f in node) for node in free]
    if g > 1 and max(whole) < g:
        return (f"a rollout worker of {amount(g)} GPUs needs them on one node, but the most free GPUs on a node is "
                f"{max(whole)} (per node: {', '.join(map(str, whole))}); set placement.gpus_per_worker={max(max(whole), 1)}")
    if strategy.startswith("STRICT"):
        return (f"rollout worker {slot} ({amount(g)} GPU, {amount(c)} CPUs) does not fit under placement.strategy="
                f"{strategy} on {cluster.nodes} node(s); set placement.strategy=PACK or fewer rollout.num_workers")
    left = ", ".join("?" if math.isinf(cp) else amount(cp) for cp in cpus)
    return (f"rollout worker {slot} ({amount(c)} CPUs) fits on no node (free CPUs per node: {left}); "
            f"set a smaller placement.cpus_per_worker or fewer rollout.num_workers")


def _check_vllm_shares(cfg: TrainConfig, loads: list[GpuLoad], engines_per_worker: int) -> None:
    """vLLM engines sharing a GPU: each takes ``rollout.vllm.gpu_memory_utilization`` of the whole GPU (a worker
    runs one engine for the policy and one per snapshot of it), so their sum on any GPU must not exceed 1."""
    if cfg.rollout.engine != "vllm" or cfg.rollout.backend != "ray":
        return
    u = cfg.rollout.vllm.gpu_memory_utilization
    for load in loads:
        workers = [h for h in load.holders if h.startswith(ROLLOUT)]
        engines = len(workers) * engines_per_worker
        if engines * u > 1 + SHARE_EPS:
            fit = max(math.floor(100 / engines) / 100, 0.01)
            each = f" ({engines_per_worker} engines each: the policy and its snapshots)" if engines_per_worker > 1 else ""
            raise UserInputError(
                f"GPU {load.gpu} of node {load.node} holds {len(workers)} vLLM rollout worker(s){each}, {engines} "
                f"engines x rollout.vllm.gpu_memory_utilization {u:g} = {amount(engines * u)} of its memory, more than "
                f"all of it; set rollout.vllm.gpu_memory_utilization={fit:g} or fewer workers per GPU "
                "(placement.gpus_per_worker)")


def _memory_fix(role: str, part: str, holders: int, cfg: TrainConfig, lora: bool, k: int) -> str:
    if role == LEARNER:
        if part == "activations":
            return (f"raise grpo.gradient_accumulation_steps above {cfg.grpo.gradient_accumulation_steps}, set "
                    "grpo.gradient_checkpointing=true or lower grpo.max_completion_length")
        if part == "kv_cache":
            return "play rollouts on Ray workers (rollout.backend=ray)"
        if lora:
            return "shard the learner over more GPUs (placement.trainer_gpus, FSDP/ZeRO-3) or use a smaller model"
        return (f"fine-tune with LoRA, or shard the learner over more GPUs (placement.trainer_gpus={2 * max(k, 1)} "
                "with torchrun and FSDP/ZeRO-3)")
    if holders > 1:
        return "put one worker on each GPU (placement.gpus_per_worker=1) or run fewer rollout.num_workers"
    if part == "kv_cache":
        return "add rollout workers (fewer episodes each) or lower grpo.groups_per_step"
    return "use a smaller model, or LoRA (the workers then hold one base copy each), or fewer frozen opponents"


def plan_placement(cfg: TrainConfig, cluster: ClusterResources, *, param_count: Optional[int], dtype_bytes: int,
                   lora: bool = False, learner_processes: int = 1, sharded: bool = False,
                   shape: Optional[ModelShape] = None) -> PlacementPlan:
    """The placement of ``cfg`` on ``cluster`` (see the module docstring); ``UserInputError`` (one line)
    when it cannot work.  ``param_count`` None and no ``placement.model_memory_gib``: memory unknown,
    not checked.  ``sharded``: the learner processes shard weights, gradients and optimizer states
    (FSDP FULL_SHARD / ZeRO-3) instead of replicating them (DDP).  ``shape`` (from the model's
    config.json) sizes the KV cache and activations; without it they are rough fractions."""
    if learner_processes < 1:
        raise ValueError("learner_processes must be >= 1")
    p, g_cfg = cfg.placement, cfg.grpo
    k = _resolve_trainer_gpus(cfg, cluster, learner_processes)
    n = cfg.rollout.num_workers if cfg.rollout.backend == "ray" else 0
    g = _resolve_worker_gpus(cfg, cluster, k, n)
    c = float(cfg.rollout.torch_threads_per_worker if p.cpus_per_worker == AUTO else p.cpus_per_worker)
    _check_gpu_arithmetic(n, g, k, cluster)
    spots = _simulate(cfg, cluster, k, n, g, c)

    weights_gib = p.model_memory_gib or (param_count * dtype_bytes / GIB if param_count else None)
    params = param_count or (int(p.model_memory_gib * GIB / dtype_bytes) if p.model_memory_gib else None)
    frozen = len({s for s in (cfg.seats.scientist, cfg.seats.lab_manager, *cfg.seats.pool_seats)
                  if s.startswith(MODEL_PREFIX)})
    snapshots = cfg.seats.snapshots.keep if any(m.seat.strip() == SNAPSHOT for ms in cfg.seats.pools.values()
                                                 for m in ms) else 0
    frozen += snapshots  # each snapshot of the policy is one more copy in every process that plays
    context = context_tokens(g_cfg.max_completion_length, cfg.rollout.max_rounds, cfg.rollout.sampling.max_new_tokens)

    def kv(episodes: int) -> float:
        return rollout_kv_gib(episodes=episodes, context_tokens=context, dtype_bytes=dtype_bytes, shape=shape,
                              weights_gib=weights_gib or 0.0)

    procs = learner_processes
    learner_bytes = DTYPE_BYTES[cfg.resolve_dtype("cuda" if k else "cpu", lora=lora)]  # the learner's weights
    learner_mem = None
    if weights_gib is not None and k:
        micro = ceil_div(g_cfg.episodes_per_step, g_cfg.gradient_accumulation_steps * procs)
        inproc = kv(ceil_div(g_cfg.episodes_per_step, procs)) if n == 0 else 0.0  # one acting seat per episode
        learner_mem = learner_memory(
            params=params, weights_gib=weights_gib, dtype_bytes=dtype_bytes, lora=lora, processes=procs,
            sharded=sharded, reference=g_cfg.beta > 0, micro_batch=micro, completion_tokens=g_cfg.max_completion_length,
            gradient_checkpointing=g_cfg.gradient_checkpointing, shape=shape, rollout_kv_gib=inproc,
            learner_dtype_bytes=learner_bytes)
        if n == 0 and frozen:
            learner_mem = MemoryEstimate(**{**learner_mem.parts(), "weights": learner_mem.weights + frozen * weights_gib})
    learners = tuple(ProcessPlacement(f"learner rank {r}", LEARNER, 0, (r,) if k else (), 1.0 if k else 0.0, 0.0,
                                      1 + (frozen if n == 0 else 0), learner_mem) for r in range(procs))
    worker_mem = None
    if weights_gib is not None and g > 0:
        worker_mem = worker_memory(weights_gib=weights_gib, copies=1 + frozen,
                                   kv_gib=kv(ceil_div(g_cfg.episodes_per_step, n)), gpus=g)
    workers = tuple(ProcessPlacement(f"rollout-{i}", ROLLOUT, node, devices, min(g, 1.0), c, 1 + frozen, worker_mem)
                    for i, (node, devices) in enumerate(spots))

    loads = []
    for node_index, node in enumerate(cluster.per_node):
        for d in range(node.gpus):
            on = [q for q in (*learners, *workers) if q.gpus and q.node == node_index and d in q.gpus]
            mem = None if any(q.memory is None for q in on) else sum(q.memory.total for q in on)
            loads.append(GpuLoad(node_index, d, tuple(q.name for q in on), sum(q.gpu_share for q in on),
                                 mem if on else 0.0))
    cap = cluster.gpu_memory_gib
    _check_vllm_shares(cfg, loads, 1 + snapshots)
    for load in loads:
        if cap and load.memory_gib and load.memory_gib > cap:
            on = [q for q in (*learners, *workers) if q.name in load.holders]
            worst = max(on, key=lambda q: q.memory.total)
            fix = _memory_fix(worst.role, worst.memory.largest(), len(on), cfg, lora, k)
            raise UserInputError(f"GPU {load.gpu} of node {load.node} ({', '.join(load.holders)}) needs an estimated "
                          f"{load.memory_gib:.1f} GiB, it has {cap:.0f} GiB (largest part: {worst.memory.largest()} "
                          f"of {worst.name}); {fix}")

    shipped = None
    if params and n:
        shipped = params * (LORA_TRAINABLE_FRACTION if lora else 1.0) * SHIPPED_BYTES_PER_PARAM / GIB
    notes = []
    if weights_gib is None:
        notes.append("memory not estimated: no config.json to read the parameter count from; pass --param-count "
                     "or set placement.model_memory_gib")
    elif shape is None and (k or g):
        notes.append("KV cache and activations are rough fractions of the weights (no config.json shape)")
    if frozen:
        notes.append(f"{frozen} frozen opponent model(s) counted at the policy's size"
                     + (f" ({snapshots} of them snapshots of the policy)" if snapshots else ""))
    return PlacementPlan(cluster=cluster, strategy=p.strategy, backend=cfg.rollout.backend, max_wait_s=p.max_wait_s,
                         trainer_gpus=k, gpus_per_worker=g, cpus_per_worker=c, learners=learners, workers=workers,
                         gpu_loads=tuple(loads), params=params, dtype_bytes=dtype_bytes, lora=lora, sharded=sharded,
                         weights_gib=weights_gib, object_store_gib=shipped, notes=tuple(notes),
                         learner_dtype_bytes=learner_bytes)
