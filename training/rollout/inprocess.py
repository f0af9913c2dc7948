"""``InProcessBackend``: the rollout backend that plays every job in the calling process
(the contract: ``training.rollout.contract``)."""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from training.rollout.contract import RolloutSpec, check_complete, check_unique_job_ids
from training.rollout.records import EpisodeJob, RolloutRecord

#: Name of the in-process "worker" in records.
INPROCESS_WORKER = "inprocess"


class InProcessBackend:
    """Plays every job in this process with one ``PolicyModel`` (batched across episodes), as shard 0.

    ``torch_threads`` sets this process's torch threads.  Only the ``hf`` engine runs here.
    """

    def __init__(self, spec: RolloutSpec, *, torch_threads: Optional[int] = None) -> None:
        if spec.engine != "hf":
            raise ValueError(f"the {spec.engine} engine runs in Ray rollout workers only (rollout.backend=ray)")
        import torch

        from training.rollout.play import load_frozen
        from training.rollout.policy import PolicyModel

        if torch_threads is not None:
            torch.set_num_threads(torch_threads)
        self.spec = spec
        self.policy = PolicyModel(spec.model, device=spec.device, chat_template=spec.chat_template)
        self.frozen = load_frozen(spec.frozen, spec.device, chat_template=spec.chat_template,
                                  model_dirs=spec.model_dirs)
        self.snapshots: dict[str, Any] = {}
        self.restarts = 0  # nothing to restart here

    @property
    def version(self) -> int:
        """Weights version the next records will carry (0: the checkpoint as loaded)."""
        return self.policy.weights_version

    def set_weights(self, state: Mapping[str, Any], version: int) -> None:
        """Load new weights (numpy arrays or tensors) and tag later records with ``version``."""
        self.policy.load_state(state, version)

    def set_snapshots(self, snapshots: Mapping[str, Mapping[str, Any]]) -> None:
        """Hold exactly these frozen snapshots (``training.rollout.engines.update_snapshots``)."""
        from training.rollout.engines import update_snapshots

        update_snapshots(self.snapshots, snapshots, self.spec)

    def collect(self, jobs: Sequence[EpisodeJob], *, sampling_seed: Optional[int] = None) -> list[RolloutRecord]:
        """Play ``jobs``; one record per job, in job order."""
        from training.rollout.play import play_shard

        check_unique_job_ids(jobs)
        if not jobs:
            return []
        records = play_shard(self.policy, jobs, self.spec, seed=sampling_seed,
                             frozen={**self.frozen, **self.snapshots}, weights_version=self.version,
                             worker=INPROCESS_WORKER)
        return check_complete(jobs, {rec.job.job_id: rec for rec in records})

    def close(self) -> None:
        """Nothing to release beyond memory; drops the model references."""
        self.frozen, self.snapshots = {}, {}
