"""The rollout contract: what a collect needs, and the protocol every rollout backend implements.

A ``RolloutSpec`` is fixed for a backend's life: the seats, how the policy samples, the engine that
generates, the limits of an episode.  It is the one place sampling is stored: a backend keeps its spec,
a Ray worker receives a copy of it when it starts, and nothing else keeps a ``SamplingConfig``.  A collect
carries only what changes from step to step: the jobs and a sampling seed (and, through ``set_weights``,
the weights and their version)::

    backend.set_weights(state, version)                         # new policy weights (tensors or arrays), version
    backend.set_snapshots({"snapshot:8": state_at_step_8})      # frozen copies an opponent pool plays
    records = backend.collect(jobs, sampling_seed=step_seed)    # one RolloutRecord per job, in job order
    backend.close()

Snapshots are frozen copies of the policy (``SNAPSHOT_PREFIX`` + the step they were taken at): each is its own
model, loaded once from the checkpoint and the snapshot's weights, and never receives ``set_weights``.  A job
whose ``opponent`` names one plays it in the other role's seat.

Seeding: every shard of a collect receives the collect's ``sampling_seed`` (``RolloutSpec.shard_sampling``), and
each model turn samples from its own stream, seeded by the collect's seed, its job id, its role and its turn
(``training.rollout.play.row_seed``): a step plays the same episodes in-process and on any number of workers,
a shard re-run after a fault replays the same episodes, and no turn reuses another's random stream.

Sharding (``shard_jobs``): contiguous shards of near-equal size, GRPO groups kept whole when that costs
little balance.  Every backend returns every job exactly once, in job order (``check_complete``), each
record tagged with the weights version that produced it.

Fault contract (``RayBackend``): a worker that dies at any moment is replaced by a fresh one loaded with
the current weights and version, and its whole unfinished shard is re-run; after ``max_restarts``
replacements within one call the backend raises ``WorkerFailure`` (one line).  ``restarts`` counts
replacements over the backend's life.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional, Protocol, Sequence

from replicalab.seats import MODEL_PREFIX
from training.config.model import SamplingConfig, VLLMConfig
from training.config.kinds import Engine
from training.rollout.records import EpisodeJob, RolloutRecord

#: A shard boundary moves to the nearest GRPO-group boundary if that shifts it by at most this
#: fraction of the ideal shard size; otherwise the group is split across workers.
GROUP_CUT_TOLERANCE = 0.25
#: A snapshot of the policy is named ``snapshot:STEP`` (the step whose weights it froze).
SNAPSHOT_PREFIX = "snapshot:"


@dataclass(frozen=True)
class RolloutSpec:
    """What every collect of one backend shares.

    ``model``: the policy's checkpoint directory or id (the ``policy`` seat); ``scientist`` /
    ``lab_manager``: seat specs (``replicalab.seats``); ``sampling``: how model seats sample (the only
    stored copy); ``engine``: ``hf`` or ``vllm`` (with ``vllm``'s settings); ``device``: the torch device of
    the models; ``chat_template``: for tokenizers without one; ``max_rounds``: the episode's limit;
    ``model_dirs``: (name, local directory) of every ``model:NAME`` seat the driver resolved
    (``training.model.snapshot``): a frozen opponent loads from its directory, never from the hub.
    """

    model: str
    scientist: str
    lab_manager: str
    sampling: SamplingConfig
    max_rounds: int = 6
    device: str = "cpu"
    engine: Engine = "hf"
    vllm: Optional[VLLMConfig] = None
    chat_template: Optional[str] = None
    opponents: tuple[str, ...] = ()
    model_dirs: tuple[tuple[str, str], ...] = ()

    @property
    def seats(self) -> dict[str, str]:
        """Role -> seat spec."""
        return {"scientist": self.scientist, "lab_manager": self.lab_manager}

    @property
    def frozen(self) -> tuple[str, ...]:
        """The ``model:`` seats: frozen opponents every player of this spec loads once."""
        seats = (self.scientist, self.lab_manager, *self.opponents)
        return tuple(dict.fromkeys(s for s in seats if s.startswith(MODEL_PREFIX)))

    def shard_sampling(self, sampling_seed: Optional[int]) -> SamplingConfig:
        """The spec's sampling, seeded for one collect (unchanged when ``sampling_seed`` is None)."""
        if sampling_seed is None:
            return self.sampling
        return self.sampling.model_copy(update={"seed": sampling_seed})


class Backend(Protocol):
    """Where episodes are played: in this process (``InProcessBackend``) or on Ray workers (``RayBackend``)."""

    spec: RolloutSpec
    #: Workers replaced so far (0 for a backend with nothing to restart).
    restarts: int

    @property
    def version(self) -> int:
        """The weights version the next records will carry (0: the checkpoint as loaded)."""

    def set_weights(self, state: Mapping[str, Any], version: int) -> None:
        """Load new policy weights (numpy arrays or tensors) and tag later records with ``version``."""

    def set_snapshots(self, snapshots: Mapping[str, Mapping[str, Any]]) -> None:
        """Hold exactly these frozen snapshots of the policy (name -> weights): load the new ones, drop the rest."""

    def collect(self, jobs: Sequence[EpisodeJob], *, sampling_seed: Optional[int] = None) -> list[RolloutRecord]:
        """Play ``jobs``; one record per job, in job order, every job exactly once."""

    def close(self) -> None:
        """Release workers, models and any Ray session the backend started."""


class WorkerFailure(RuntimeError):
    """Rollout workers kept dying: more than ``max_restarts`` replacements within one call."""


def check_unique_job_ids(jobs: Sequence[EpisodeJob]) -> None:
    """Raise ``ValueError`` if two jobs share a ``job_id`` (results are keyed by it)."""
    ids = [job.job_id for job in jobs]
    if len(set(ids)) != len(ids):
        raise ValueError("job_id must be unique within a collect")


def shard_jobs(jobs: Sequence[EpisodeJob], num_shards: int) -> list[list[EpisodeJob]]:
    """Split ``jobs`` into at most ``num_shards`` non-empty contiguous shards of near-equal size.

    Each cut prefers the nearest boundary between consecutive jobs of different ``group`` when it is
    within ``GROUP_CUT_TOLERANCE`` of the ideal shard size, so GRPO groups usually stay on one worker.
    """
    n = len(jobs)
    if num_shards < 1:
        raise ValueError("num_shards must be >= 1")
    group_cuts = [i for i in range(1, n) if jobs[i].group != jobs[i - 1].group]
    size = n / num_shards
    cuts = [0]
    for k in range(1, num_shards):
        ideal = round(k * size)
        near = min(group_cuts, key=lambda c: (abs(c - ideal), c), default=None)
        cut = near if near is not None and abs(near - ideal) <= GROUP_CUT_TOLERANCE * size else ideal
        cuts.append(max(cut, cuts[-1]))
    cuts.append(n)
    return [list(jobs[a:b]) for a, b in zip(cuts, cuts[1:]) if b > a]


def check_complete(jobs: Sequence[EpisodeJob], records: Mapping[int, RolloutRecord]) -> list[RolloutRecord]:
    """Records for ``jobs`` in job order; every job exactly once, nothing foreign."""
    wanted = {job.job_id for job in jobs}
    if set(records) != wanted:
        missing, extra = sorted(wanted - set(records)), sorted(set(records) - wanted)
        raise AssertionError(f"rollout lost or invented episodes: missing {missing[:10]}, extra {extra[:10]}")
    ordered = [records[job.job_id] for job in jobs]
    if any(rec.job != job for rec, job in zip(ordered, jobs)):
        raise AssertionError("a record carries a different job than the one it was keyed under")
    return ordered

