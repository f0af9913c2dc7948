"""``RolloutWorker``: one Ray actor that owns a policy copy, its frozen opponents and its environments.

The driver (``training.rollout.ray_backend.RayBackend``) broadcasts weights with a version number and
sends each worker a contiguous shard of ``EpisodeJob``s; the worker plays them with ``play_shard`` and
returns picklable ``RolloutRecord``s tagged with the weights version that produced them.

Heavy imports (torch, transformers) happen inside the actor, never at module import, so the driver
can import this module cheaply.  ``inject_fault`` exists for fault-injection tests and benchmarks.
"""

from __future__ import annotations

import os
import time
import warnings
from typing import Any, Mapping, Optional, Sequence

import ray

from training.rollout.contract import RolloutSpec
from training.rollout.records import EpisodeJob, RolloutRecord

#: Environment every worker sets before importing transformers, whatever it inherited: no hub (the driver resolved
#: every model to a local directory, ``training.model.snapshot``), no tokenizer threads.
WORKER_ENV: dict[str, str] = {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
#: Exit status of a worker that was told to crash (``inject_fault(crash=True)``).
INJECTED_CRASH_EXIT_CODE = 13


class RolloutWorkerImpl:
    """The plain class behind the ``RolloutWorker`` actor (usable without Ray in a pinch): it plays
    ``spec`` (``training.rollout.contract.RolloutSpec``: seats, sampling, engine, limits) with
    ``torch_threads`` torch threads."""

    def __init__(self, spec: RolloutSpec, *, name: str, torch_threads: int = 1) -> None:
        os.environ.update(WORKER_ENV)
        import torch

        from training.rollout.engines import make_policy
        from training.rollout.play import load_frozen

        torch.set_num_threads(torch_threads)
        self.name = name
        self.spec = spec
        self.policy = make_policy(spec)
        self.frozen = load_frozen(spec.frozen, spec.device, chat_template=spec.chat_template,
                                  model_dirs=spec.model_dirs)
        self.snapshots: dict[str, Any] = {}
        self._delay_s = 0.0
        self._crash_next = False
        self._crash_on_weights = False

    def ready(self) -> dict[str, Any]:
        """Who and where this worker is (blocks until construction finished)."""
        import torch

        return dict(name=self.name, pid=os.getpid(), torch_threads=torch.get_num_threads(),
                    weights_version=self.policy.weights_version)

    def set_weights(self, state: Mapping[str, Any], version: int) -> int:
        """Load ``state`` (numpy arrays, read-only views into the object store) and record ``version``."""
        if self._crash_on_weights:
            os._exit(INJECTED_CRASH_EXIT_CODE)  # dies while loading: the new weights never arrive
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*not writable.*")
            self.policy.load_state(state, version)
        return self.policy.weights_version

    def join_sync_group(self, address: Any, rank: int) -> int:
        """Join the weight-sync group at ``address`` (``training.rollout.sync_group``) as ``rank``, leaving any
        older one; blocks until every member joined."""
        from training.rollout.sync_group import join_group

        self._sync_group = None
        self._sync_group = join_group(address, rank)
        self._sync_backend = address.backend
        return rank

    def receive_weights(self, layout: Any, version: int) -> int:
        """Receive the policy's weights over the weight-sync group (``layout``: a ``WeightLayout``), load
        them as they arrive and record ``version``; raises if the group fails (the version stays the old one)."""
        from training.rollout.sync_group import bucket_device, receive_weights

        if self._crash_on_weights:
            os._exit(INJECTED_CRASH_EXIT_CODE)  # dies while loading: the new weights never arrive
        group = getattr(self, "_sync_group", None)
        if group is None:
            raise RuntimeError(f"worker {self.name} is in no weight-sync group")
        device = bucket_device(self._sync_backend, self.policy.device)
        self.policy.load_stream(receive_weights(group, layout, device), version, dict(layout.extras))
        return self.policy.weights_version

    def state_tensors(self, snapshot: Optional[str] = None) -> dict[str, Any]:
        """The policy's (or frozen ``snapshot``'s) parameters as CPU tensors in their own dtype (to check a sync
        bit for bit)."""
        model = (self.policy if snapshot is None else self.snapshots[snapshot]).model
        return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}

    def state_digests(self) -> dict[str, tuple[str, str]]:
        """name -> (dtype, SHA-256 of the bytes) of every policy tensor (``tensor_digest``): a bitwise check of a
        large model without shipping it back."""
        from training.rollout.sync_wire import tensor_digest

        return {k: (str(v.dtype).removeprefix("torch."), tensor_digest(v))
                for k, v in self.policy.model.state_dict().items()}

    def set_snapshots(self, names: Sequence[str], *states: Mapping[str, Any]) -> list[str]:
        """Hold exactly the frozen snapshots ``names`` (their weights in ``states``, in order); return the names."""
        from training.rollout.engines import update_snapshots

        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*not writable.*")
            update_snapshots(self.snapshots, dict(zip(names, states, strict=True)), self.spec)
        return sorted(self.snapshots)

    def weights_version(self) -> int:
        """The version of the weights this worker holds (after every queued ``set_weights``)."""
        return self.policy.weights_version

    def state_numpy(self) -> dict[str, Any]:
        """The worker's current parameters (to check a broadcast reached it)."""
        return self.policy.state_numpy()

    def collect(self, jobs: Sequence[EpisodeJob], seed: Optional[int] = None) -> list[RolloutRecord]:
        """Play ``jobs`` with the spec's sampling reseeded by ``seed`` (this shard's seed; None: as configured)
        and return one record per job, in order."""
        from training.rollout.play import play_shard

        records = play_shard(self.policy, jobs, self.spec, seed=seed, frozen={**self.frozen, **self.snapshots},
                             weights_version=self.policy.weights_version, worker=self.name)
        if hasattr(self.policy, "sleep"):  # a vLLM engine sharing the learner's GPU gives it back until the next use
            self.policy.sleep()
        if self._crash_next:
            os._exit(INJECTED_CRASH_EXIT_CODE)  # the episodes were played, then lost with the process
        return records

    def inject_fault(self, *, delay_s: float = 0.0, crash: bool = False, crash_on_weights: bool = False) -> None:
        """Test hook: sleep ``delay_s`` before every generation call; with ``crash`` the next
        ``collect`` kills this process after playing its jobs (before returning them); with
        ``crash_on_weights`` the next ``set_weights`` kills it before loading anything."""
        self._crash_next = crash
        self._crash_on_weights = crash_on_weights
        if delay_s > 0 and self._delay_s == 0:
            for attr in ("generate", "generate_ids"):
                inner = getattr(self.policy, attr, None)
                if inner is not None:
                    setattr(self.policy, attr, _delayed(inner, self))
        self._delay_s = delay_s


def _delayed(inner: Any, worker: RolloutWorkerImpl) -> Any:
    def call(*args: Any, **kwargs: Any) -> Any:
        time.sleep(worker._delay_s)
        return inner(*args, **kwargs)

    return call


#: The actor class.  Ray-level restarts are off: the backend replaces dead workers itself, so it
#: knows which episodes to re-run.
RolloutWorker = ray.remote(max_restarts=0, max_task_retries=0)(RolloutWorkerImpl)


def make_worker(spec: RolloutSpec, *, name: str, torch_threads: int = 1, num_cpus: Optional[float] = None,
                num_gpus: float = 0.0, options: Optional[dict[str, Any]] = None, python: Optional[str] = None) -> Any:
    """Start one ``RolloutWorker`` actor playing ``spec`` and return its handle (construction runs
    asynchronously; call ``ready`` to wait for it).  It reserves ``num_cpus`` (default: ``torch_threads``) CPUs
    and ``num_gpus`` GPUs, unless ``options`` (a placement group's ``worker_options``) say otherwise.
    ``python``: the interpreter the actor runs in (the vLLM environment for the vllm engine)."""
    actor_options = dict(options or {"num_cpus": torch_threads if num_cpus is None else num_cpus,
                                     "num_gpus": num_gpus})
    if python is not None:
        actor_options["runtime_env"] = {"py_executable": python}
    return RolloutWorker.options(**actor_options).remote(spec, name=name, torch_threads=torch_threads)
