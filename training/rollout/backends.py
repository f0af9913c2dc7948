"""``make_backend``: the rollout backend of a kind, for a ``RolloutSpec`` (``training.rollout.contract``).

``"inprocess"`` plays in the calling process (``training.rollout.inprocess``); ``"ray"`` keeps a pool of Ray
``RolloutWorker`` actors (``training.rollout.ray_backend``).  A pool's options (workers, threads, restarts,
placement) shape where episodes run, never what they are.
"""

from __future__ import annotations

from training.config.kinds import BACKENDS, BackendKind
from training.rollout.contract import Backend, RolloutSpec
from training.rollout.inprocess import InProcessBackend
from training.rollout.ray_backend import RayBackend, RayPool


def make_backend(kind: BackendKind, spec: RolloutSpec, *, pool: RayPool | None = None,
                 torch_threads: int | None = None) -> Backend:
    """``InProcessBackend`` for ``"inprocess"`` (``torch_threads``: this process's), ``RayBackend`` for
    ``"ray"`` (``pool``: its workers and placement; default one worker)."""
    if kind == "inprocess":
        return InProcessBackend(spec, torch_threads=torch_threads)
    if kind == "ray":
        return RayBackend(spec, pool or RayPool())
    raise ValueError(f"unknown rollout backend {kind!r}: use {' or '.join(map(repr, BACKENDS))}")
