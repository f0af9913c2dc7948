"""``PlacementConfig``: which GPUs and CPUs the learner and the rollout workers hold (torch- and ray-free).

Hung on ``TrainConfig`` as ``placement:``.  ``training.cluster.plan.plan_placement`` turns it, the
cluster's resources and the model's size into a ``PlacementPlan`` before anything loads, and refuses an
impossible layout with one line.  ``"auto"`` values resolve there:

- ``trainer_gpus: auto``: one GPU per learner process when the cluster has GPUs and ``device`` is not
  ``cpu``, else 0.  The learner's GPUs are GPUs ``0..k-1`` of the driver's node, reserved in the Ray
  placement group so no rollout worker lands on them.
- ``gpus_per_worker: auto``: 0 (CPU workers) without GPUs or on ``device: cpu``; else one GPU per worker
  when the GPUs left after the learner's suffice, else the largest share ``1/m`` that packs ``m``
  workers onto each free GPU.
- ``cpus_per_worker: auto``: ``rollout.torch_threads_per_worker``.
"""

from __future__ import annotations

from typing import Literal, Optional, Union

from pydantic import BaseModel, Field, field_validator

from training.config.loading import STRICT

#: Ray placement-group strategies (ray.util.placement_group).
PLACEMENT_STRATEGIES = Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"]
AUTO = "auto"


class PlacementConfig(BaseModel):
    """GPUs and CPUs of the learner and of each rollout worker, and how Ray places the workers."""

    model_config = STRICT

    trainer_gpus: Union[Literal["auto"], int] = Field(default=AUTO, description=(
        "GPUs the learner processes hold (one per process: torchrun/accelerate launch with this many "
        "processes), GPUs 0..k-1 of the driver's node, reserved so no rollout worker takes them; "
        "'auto' = 1 when the cluster has a GPU and device is not cpu, else 0."))
    gpus_per_worker: Union[Literal["auto"], float] = Field(default=AUTO, description=(
        "GPUs each Ray rollout worker reserves: a fraction 1/m puts m workers (m model copies) on one GPU, "
        "1 a GPU each (the plan refuses more: a worker's engine uses one GPU, no tensor parallelism); 0 plays on "
        "CPU; 'auto' = 1 per worker when "
        "enough GPUs are left after the learner's, else the largest 1/m that fits, 0 without GPUs."))
    cpus_per_worker: Union[Literal["auto"], float] = Field(default=AUTO, description=(
        "CPUs each Ray rollout worker reserves; 'auto' = rollout.torch_threads_per_worker."))
    strategy: PLACEMENT_STRATEGIES = Field(default="PACK", description=(
        "Ray placement-group strategy for the learner's and the workers' bundles: PACK (few nodes, "
        "best effort), SPREAD (many nodes, best effort), STRICT_PACK (one node), STRICT_SPREAD "
        "(one bundle per node)."))
    model_memory_gib: Optional[float] = Field(default=None, gt=0.0, description=(
        "GiB of GPU memory one copy of the model's weights takes; None estimates it from the parameter "
        "count (config.json) and the dtype."))
    max_wait_s: float = Field(default=300.0, gt=0.0, description=(
        "Seconds to wait for Ray to reserve the placement group before failing with the missing "
        "resources named (nodes still joining, or other jobs holding GPUs)."))

    @field_validator("trainer_gpus", mode="before")
    @classmethod
    def _trainer_gpus(cls, v: object) -> object:
        if isinstance(v, bool) or (isinstance(v, (int, float)) and (v < 0 or v != int(v))):
            raise ValueError(f"placement.trainer_gpus must be 'auto' or a whole number >= 0, got {v!r}")
        return v

    @field_validator("gpus_per_worker")
    @classmethod
    def _gpus_per_worker(cls, v: Union[str, float]) -> Union[str, float]:
        if v == AUTO:
            return v
        if v < 0:
            raise ValueError(f"placement.gpus_per_worker must be 'auto', 0 (CPU workers) or > 0, got {v!r}")
        if v > 1 and v != int(v):
            raise ValueError(f"placement.gpus_per_worker {v} above 1 must be a whole number of GPUs "
                             "(Ray cannot split a worker over a fraction of a second GPU)")
        return v

    @field_validator("cpus_per_worker")
    @classmethod
    def _cpus_per_worker(cls, v: Union[str, float]) -> Union[str, float]:
        if v != AUTO and v < 0:
            raise ValueError(f"placement.cpus_per_worker must be 'auto' or >= 0, got {v!r}")
        return v
