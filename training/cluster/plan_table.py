"""The pre-flight table of a ``PlacementPlan``: every process with its node, GPUs, share, CPUs, model copies
and estimated memory by part, then every GPU's load, the model copies and the object store's need."""

from __future__ import annotations

from training.cluster.memory import gib
from training.cluster.plan import PlacementPlan, ProcessPlacement, amount

_PARTS = ("weights", "gradients", "optimizer", "reference", "activations", "kv_cache", "overhead")
_HEADS = ("weights", "grads", "adam", "ref", "activ", "kv", "cuda")


def _devices(q: ProcessPlacement) -> str:
    return ",".join(str(d) for d in q.gpus) if q.gpus else "cpu"


def _span(k: int) -> str:
    return "0" if k == 1 else f"0-{k - 1}"


def render_plan(plan: PlacementPlan) -> str:
    """The pre-flight table: the layout, each process's GPUs and estimated memory, each GPU's total."""
    if plan.params:
        size = f"{plan.params / 1e9:.2f}B parameters" if plan.params >= 1e8 else f"{plan.params / 1e6:.2f}M parameters"
    else:
        size = "parameter count unknown"
    tuning = "LoRA" if plan.lora else "full fine-tuning"
    k = len(plan.learners)
    learner = (f"{k} process(es)" + ("" if k == 1 else " sharded (FSDP/ZeRO-3)" if plan.sharded else " replicated (DDP)")
               + (f", one GPU each: GPU{'s' if plan.trainer_gpus > 1 else ''} {_span(plan.trainer_gpus)} of node 0, reserved" if plan.trainer_gpus
                  else " on CPU"))
    if plan.workers:
        rollout = (f"{len(plan.workers)} Ray rollout worker(s) x {amount(plan.gpus_per_worker)} GPU, "
                   f"{amount(plan.cpus_per_worker)} CPU, device {plan.worker_device}; strategy {plan.strategy}")
    else:
        rollout = "rollouts in the learner process (rollout.backend=inprocess)"
    learner_bytes = plan.learner_dtype_bytes or plan.dtype_bytes
    weights = (f"{plan.dtype_bytes}-byte weights" if learner_bytes == plan.dtype_bytes or not plan.trainer_gpus
               else f"{learner_bytes}-byte learner weights, {plan.dtype_bytes}-byte rollout weights")
    lines = [f"Placement plan: {size}, {weights}, {tuning}",
             f"  cluster: {plan.cluster.describe()}",
             f"  learner: {learner}", f"  rollout: {rollout}", ""]
    rows = [("process", "node", "GPU", "share", "CPUs", "models", *_HEADS, "GiB/GPU")]
    for q in (*plan.learners, *plan.workers):
        parts = [gib(getattr(q.memory, f)) for f in _PARTS] if q.memory else ["?" if q.gpus else "-"] * len(_PARTS)
        total = f"{q.memory.total:.1f}" if q.memory else ("?" if q.gpus else "-")
        rows.append((q.name, str(q.node), _devices(q), amount(q.gpu_share) if q.gpus else "-",
                     amount(q.cpus) if q.cpus else "-", str(q.model_copies), *parts, total))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines += ["  " + "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(r, widths)))
              for r in rows]
    cap = plan.cluster.gpu_memory_gib
    lines += ["", "  GPU memory (estimated GiB):"] if plan.gpu_loads else [""]
    for load in plan.gpu_loads:
        used = "idle" if not load.holders else ("?" if load.memory_gib is None else f"{load.memory_gib:.1f}")
        of = f" / {cap:.0f}" if cap and load.holders else ""
        lines.append(f"    node {load.node} GPU {load.gpu}: {used}{of}  {', '.join(load.holders)}")
    copies = sum(q.model_copies for q in plan.workers)
    lines.append(f"  model copies: learner {len(plan.learners)}{' (shards)' if plan.sharded and len(plan.learners) > 1 else ''}"
                 f", rollout workers {copies}")
    if plan.object_store_gib is not None:
        shipped = (f"{plan.object_store_gib:.1f} GiB" if plan.object_store_gib >= 0.1
                   else f"{plan.object_store_gib * 1024:.1f} MiB")
        lines.append(f"  object store: {shipped} per weights broadcast (float32 arrays"
                     f"{', adapters only' if plan.lora else ''}); every node's object store (/dev/shm) needs room for two")
    lines += [f"  note: {note}" for note in plan.notes]
    return "\n".join(lines)
