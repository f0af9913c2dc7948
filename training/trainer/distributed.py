"""The learner's processes under ``torchrun`` / ``accelerate launch``: which one is main, and the few
collectives a run needs.

One process (no ``WORLD_SIZE`` above 1) is the common case: every function is then the identity and
touches no process group.  With N processes, the rollout backend, the run logger (W&B included), the
validation check, the final model's tokenizer and the run directory belong to the main process (rank
0); the others reach them only through these collectives (``torch.distributed`` object collectives:
gloo on CPU, NCCL on GPUs).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, TypeVar

from training.config.learner import DEFAULT_TIMEOUT_MINUTES

T = TypeVar("T")
#: The process group's timeout when the caller gives none (``learner.timeout_minutes``' default).
DEFAULT_TIMEOUT_S = DEFAULT_TIMEOUT_MINUTES * 60
#: What tells accelerate to start the process group through DeepSpeed.
ACCELERATE_DEEPSPEED_ENV = "ACCELERATE_USE_DEEPSPEED"


@dataclass(frozen=True)
class Learner:
    """This process's place among the learner's processes (from the launcher's environment)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def learner_from_env() -> Learner:
    """``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK`` as torchrun and accelerate launch set them."""
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    if world <= 1:
        return Learner()
    return Learner(rank=int(os.environ.get("RANK", "0")), world_size=world,
                   local_rank=int(os.environ.get("LOCAL_RANK", "0")))


def init_learner(device: str, *, timeout_s: float = DEFAULT_TIMEOUT_S, deepspeed: bool = False) -> Learner:
    """This process's ``Learner``; with several processes, the process group is started here (through
    accelerate, whose state the trainer then reuses) so the run can agree on things before the trainer
    exists.  ``timeout_s`` bounds every collective (``learner.timeout_minutes``: the others wait while the
    main process alone starts workers or hashes a checkpoint; torch's default is 10 minutes with NCCL);
    ``deepspeed`` starts the group through DeepSpeed (``learner.sharding=zero3``), as the trainer's accelerator
    expects."""
    learner = learner_from_env()
    if learner.distributed:
        from datetime import timedelta

        from accelerate import PartialState

        previous = os.environ.get(ACCELERATE_DEEPSPEED_ENV)
        if deepspeed:
            os.environ[ACCELERATE_DEEPSPEED_ENV] = "true"
        try:
            PartialState(cpu=device == "cpu", timeout=timedelta(seconds=timeout_s))
        finally:
            if deepspeed and previous is None:
                os.environ.pop(ACCELERATE_DEEPSPEED_ENV, None)
    return learner


def _dist() -> Optional[Any]:
    """``torch.distributed`` when a process group with several processes is up, else None (one process:
    torch is not even imported)."""
    if not learner_from_env().distributed:
        return None
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return dist
    return None


def barrier() -> None:
    dist = _dist()
    if dist is not None:
        dist.barrier()


def broadcast_from_main(obj: T) -> T:
    """The main process's ``obj`` on every process."""
    dist = _dist()
    if dist is None:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def gather_to_main(obj: T) -> Optional[list[T]]:
    """Every process's ``obj`` in rank order on the main process; None on the others."""
    dist = _dist()
    if dist is None:
        return [obj]
    out: Optional[list[Any]] = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
    dist.gather_object(obj, out, dst=0)
    return out


def scatter_from_main(parts: Optional[Sequence[T]]) -> T:
    """Process ``r`` receives ``parts[r]`` of the main process's ``parts`` (ignored elsewhere)."""
    dist = _dist()
    if dist is None:
        assert parts is not None
        return parts[0]
    box: list[Any] = [None]
    dist.scatter_object_list(box, list(parts) if dist.get_rank() == 0 else None, src=0)
    return box[0]


def max_over_processes(value: int) -> int:
    """The largest of every process's ``value``, on every process (``any`` for flags 0/1)."""
    dist = _dist()
    if dist is None:
        return int(value)
    import torch

    device = f"cuda:{torch.cuda.current_device()}" if dist.get_backend() == "nccl" else "cpu"
    box = torch.tensor([int(value)], dtype=torch.long, device=device)
    dist.all_reduce(box, op=dist.ReduceOp.MAX)
    return int(box.item())


def run_on_main(fn: Callable[[], T], *, share: bool = False) -> Optional[T]:
    """``fn()`` on the main process only.  Every process learns whether it raised and raises it too (so
    no process waits on a failed one); ``share=True`` hands its result to every process, else the others
    get None."""
    if _dist() is None:
        return fn()
    learner = learner_from_env()
    result: Any = None
    error: Optional[BaseException] = None
    if learner.is_main:
        try:
            result = fn()
        except BaseException as exc:  # re-raised below, after the others heard of it
            error = exc
    failed = broadcast_from_main(_shareable(error))
    if error is not None:
        raise error
    if failed is not None:
        raise failed
    return broadcast_from_main(result) if share else result


def _shareable(error: Optional[BaseException]) -> Optional[BaseException]:
    """What the other processes raise for the main process's ``error``: the same user-input error (one
    line on every process), else a RuntimeError naming it."""
    from training.errors import UserInputError

    if error is None or isinstance(error, UserInputError):
        return error
    return RuntimeError(f"the main learner process failed ({type(error).__name__}: {error})")
