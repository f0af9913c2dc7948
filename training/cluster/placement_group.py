"""Reserve a ``PlacementPlan`` in Ray: one placement group, the learner's bundle first, then one bundle
per rollout worker (see ``training.cluster.plan``).  Needs a connected Ray session.

``make_placement_group(plan)`` reserves the plan: bundle 0 holds the learner's GPUs on the driver's node (no
actor uses it: the reservation keeps workers off those GPUs), then one bundle ``{"GPU": g, "CPU": c}`` per
rollout worker.  It waits up to ``placement.max_wait_s`` (naming the missing resources on timeout), checks that
the learner's bundle got the GPUs the learner uses, and returns a ``PlacedGroup`` whose ``worker_options(slot)``
are the actor options of worker ``slot`` (a replacement worker reuses its slot's bundle)."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

from training.cluster.launcher import visible_gpu_ids
from training.cluster.plan import PlacementPlan
from training.errors import UserInputError

logger = logging.getLogger(__name__)

#: Tiny amount of the driver node's ``node:<ip>`` resource that pins the learner's bundle to that node.
NODE_PIN = 0.001
#: Seconds to wait for the probe task that reads which GPU ids the learner's bundle holds.
PROBE_TIMEOUT_S = 60.0
#: Name prefix of the placement groups this module creates.
GROUP_NAME = "replicalab-placement"


@dataclass
class PlacedGroup:
    """A reserved placement group.  ``strategies[slot]`` is the scheduling strategy of rollout worker
    ``slot`` (None when its bundle would be empty: no GPU and no CPU); ``trainer_gpu_ids`` are the Ray
    GPU ids the learner's bundle holds (what ``CUDA_VISIBLE_DEVICES`` would say)."""

    placement_group: Any
    strategies: list[Any]
    trainer_gpu_ids: tuple[str, ...]
    gpus_per_worker: float
    cpus_per_worker: float

    def worker_options(self, slot: int) -> dict[str, Any]:
        """Ray actor options of rollout worker ``slot`` (``actor_cls.options(**worker_options(slot))``)."""
        options: dict[str, Any] = {"num_gpus": self.gpus_per_worker, "num_cpus": self.cpus_per_worker}
        if self.strategies[slot] is not None:
            options["scheduling_strategy"] = self.strategies[slot]
        return options

    def remove(self) -> None:
        """Give the reservation back (the workers in it should be gone first)."""
        if self.placement_group is not None:
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(self.placement_group)
            self.placement_group = None


def worker_bundles(plan: PlacementPlan) -> list[dict[str, float]]:
    """One bundle per rollout worker of ``plan`` (none when a worker reserves nothing)."""
    worker = plan.worker_bundle()
    return [dict(worker) for _ in plan.workers] if worker is not None else []


def _worker_strategies(group: Any, plan: PlacementPlan, first_worker: int) -> list[Any]:
    """Each rollout worker's scheduling strategy: its bundle of ``group`` from ``first_worker`` on (None for
    every worker when they reserve nothing)."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    reserved = plan.worker_bundle() is not None
    return [PlacementGroupSchedulingStrategy(placement_group=group, placement_group_bundle_index=first_worker + i)
            if reserved else None for i in range(len(plan.workers))]


def trial_bundles(plan: PlacementPlan, learner_cpus: float) -> list[dict[str, float]]:
    """The bundles a Ray Tune trial of ``plan`` reserves: the learner's first (the trial itself: ``learner_cpus``
    CPUs and the learner's GPUs), then one per rollout worker, as ``make_placement_group`` would."""
    return [{"CPU": float(learner_cpus), **(plan.trainer_bundle() or {})}, *worker_bundles(plan)]


def adopt_trial_group(plan: PlacementPlan) -> PlacedGroup | None:
    """Inside a Ray Tune trial reserved with ``trial_bundles(plan, ...)``: the trial's own placement group, its
    rollout workers in bundles 1.. (the trial holds bundle 0); None outside a placement group.  The group is
    Tune's: ``remove`` leaves it alone."""
    from ray.util import get_current_placement_group

    group = get_current_placement_group()
    if group is None:
        return None
    wanted = 1 + len(worker_bundles(plan))
    if len(group.bundle_specs) != wanted:
        raise UserInputError(f"this process runs in a placement group of {len(group.bundle_specs)} bundles, but the "
                             f"run's plan needs {wanted} (the learner's and one per rollout worker); reserve it "
                             "with training.cluster.placement_group.trial_bundles")
    logger.info("rollout workers in this trial's placement group: %d bundles", wanted)
    return PlacedGroup(None, _worker_strategies(group, plan, 1), (), plan.gpus_per_worker, plan.cpus_per_worker)


def learner_gpu_ids(k: int) -> tuple[str, ...]:
    """The GPU ids the learner's ``k`` processes use: the first ``k`` of this process's
    ``CUDA_VISIBLE_DEVICES``, else ``0..k-1`` (rank r uses ``cuda:r``)."""
    visible = visible_gpu_ids()
    ids = visible if visible else [str(i) for i in range(k)]
    return tuple(ids[:k])


def _missing(bundles: list[dict[str, float]], strategy: str, waited: float) -> str:
    import ray

    need: dict[str, float] = {}
    for bundle in bundles:
        for key, value in bundle.items():
            if not key.startswith("node:"):
                need[key] = need.get(key, 0.0) + value
    free, total = ray.available_resources(), ray.cluster_resources()
    alive = sum(1 for n in ray.nodes() if n.get("Alive"))
    have = ", ".join(f"{free.get(k, 0):g}/{total.get(k, 0):g} {k}" for k in need)
    short = {k: v - free.get(k, 0.0) for k, v in need.items() if v > free.get(k, 0.0) + 1e-9}
    why = (f"missing {', '.join(f'{v:g} {k}' for k, v in short.items())} (held by other actors or jobs, or nodes "
           "not joined yet: check `ray status`)" if short else
           "the free resources are fragmented over nodes/GPUs the strategy cannot combine")
    return (f"Ray could not reserve the placement group in {waited:g}s: it needs "
            f"{', '.join(f'{v:g} {k}' for k, v in need.items())} in {len(bundles)} bundles (strategy {strategy}); "
            f"free/total on {alive} alive node(s): {have}; {why}")


def make_placement_group(plan: PlacementPlan) -> PlacedGroup:
    """Reserve ``plan`` in the connected Ray cluster and return the workers' scheduling strategies.

    Bundle 0 is the learner's ``{"GPU": trainer_gpus}`` pinned to this (the driver's) node, when the
    learner holds GPUs; then one bundle per rollout worker.  Waits ``plan.max_wait_s``; on timeout the
    group is removed and ``UserInputError`` names the missing resources.  The learner's bundle must hold
    the GPUs the learner uses (``learner_gpu_ids``), else another job holds them: ``UserInputError``.
    """
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    if not ray.is_initialized():
        raise RuntimeError("make_placement_group needs a connected Ray session (ray.init first)")
    bundles: list[dict[str, float]] = []
    trainer = plan.trainer_bundle()
    if trainer is not None:
        bundles.append({**trainer, f"node:{ray.util.get_node_ip_address()}": NODE_PIN})
    first_worker = len(bundles)
    bundles += worker_bundles(plan)
    if not bundles:
        return PlacedGroup(None, [None] * len(plan.workers), (), plan.gpus_per_worker, plan.cpus_per_worker)
    group = placement_group(bundles, strategy=plan.strategy, name=f"{GROUP_NAME}-{os.getpid()}")
    if not group.wait(timeout_seconds=plan.max_wait_s):
        message = _missing(bundles, plan.strategy, plan.max_wait_s)
        remove_placement_group(group)
        raise UserInputError(message)
    placed = PlacedGroup(group, _worker_strategies(group, plan, first_worker), (), plan.gpus_per_worker,
                         plan.cpus_per_worker)
    if trainer is not None:
        placed.trainer_gpu_ids = _probe_trainer_ids(group, plan.trainer_gpus)
        expected = learner_gpu_ids(plan.trainer_gpus)
        if sorted(placed.trainer_gpu_ids) != sorted(expected):
            placed.remove()
            raise UserInputError(
                f"the learner's reserved GPUs are Ray GPU ids {list(placed.trainer_gpu_ids)} but the "
                f"learner uses {list(expected)} (its first {plan.trainer_gpus} visible GPUs): another job or "
                "actor holds them on this node; stop it, or start the run on a node whose first GPUs are free")
    logger.info("placement group ready: %d bundles, learner GPUs %s", len(bundles), list(placed.trainer_gpu_ids))
    return placed


def _probe_trainer_ids(group: Any, gpus: int) -> tuple[str, ...]:
    """The GPU ids of bundle 0, read by a task that holds them for a moment."""
    import ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    @ray.remote(num_cpus=0, num_gpus=gpus, max_retries=0)
    def ids() -> list[str]:
        return [str(i) for i in ray.get_gpu_ids()]

    strategy = PlacementGroupSchedulingStrategy(placement_group=group, placement_group_bundle_index=0)
    return tuple(ray.get(ids.options(scheduling_strategy=strategy).remote(), timeout=PROBE_TIMEOUT_S))

