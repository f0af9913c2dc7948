"""Rollouts one step ahead of the learner (``rollout.max_staleness``).

At ``max_staleness=0`` every step plays its episodes with the weights it trains (on-policy).  At 1, once a step's
batch is in hand and the step's weights are on the workers, the next step's episodes are submitted to the Ray
backend (``RayBackend.submit``) and played while the learner trains: step ``t + 1`` trains on episodes played with
the weights of step ``t`` (``RolloutRecord.weights_version == t``), and the step's wall time approaches
``max(play, learn)`` instead of ``play + learn``.  The first step after a start plays on-policy.

What step ``t + 1`` plays never depends on timing: TRL feeds the dataset rows in order (``shuffle_dataset=False``),
so its prompts are this step's moved on by the step's number of groups (``next_prompts``; rows are distinct);
its jobs, opponents and sampling seed are those an on-policy run would give step ``t + 1`` (the opponent pool as
held at step ``t``).  A step whose prompts differ from the prediction (never, with TRL's sampler) plays on-policy
with a warning.  The bound is checked on every batch before the learner sees it: a record whose
``weights_version`` is older than ``step - max_staleness`` (or newer than ``step``) fails the step.

Checkpoints: the batch played ahead is finished and saved into each checkpoint (``AHEAD_FILE``: its step, prompts,
jobs and records) before the manifest seals it; a resumed run trains on exactly those records, so resuming is as
exact at staleness 1 as at 0.  A call that needs the workers meanwhile (the validation check, a checkpoint) first
waits for the batch in flight: those steps do not overlap.
"""

from __future__ import annotations

import logging
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from transformers import TrainerCallback

from training.rollout.records import EpisodeJob, RolloutRecord
from training.trainer.checkpoints import CHECKPOINT_PREFIX

#: The checkpoint's file holding the batch played ahead (a pickle of ``Ahead`` without its pending handle).
AHEAD_FILE = "rollouts_ahead.pkl"

logger = logging.getLogger(__name__)


@dataclass
class Ahead:
    """A batch played ahead: the step it is for, its prompts (TRL's, in order), its jobs, the backend's pending
    collect and, once finished, its records."""

    step: int
    prompts: list[str]
    jobs: list[EpisodeJob]
    pending: Any = None
    records: Optional[list[RolloutRecord]] = None

    def finish(self, backend: Any) -> list[RolloutRecord]:
        if self.records is None:
            self.records = backend.fetch(self.pending)
            self.pending = None
        return self.records


class RolloutsAhead:
    """The next step's batch in flight (main process).  ``keys``: the prompt of every dataset row, in order."""

    def __init__(self, keys: Sequence[str]) -> None:
        self.keys = list(keys)
        self.index = {key: i for i, key in enumerate(self.keys)}
        self.ahead: Optional[Ahead] = None

    def next_prompts(self, prompts: Sequence[str]) -> Optional[list[str]]:
        """The next step's prompts: each of ``prompts`` moved on by as many rows as the step has groups; None past
        the last row (or for prompts that are not rows)."""
        shift = len(set(prompts))
        try:
            rows = [self.index[p] + shift for p in prompts]
        except KeyError:
            return None
        return None if not rows or max(rows) >= len(self.keys) else [self.keys[i] for i in rows]

    def submit(self, step: int, prompts: Sequence[str], jobs: Sequence[EpisodeJob], backend: Any,
               sampling_seed: int) -> None:
        """Start playing step ``step``'s ``jobs`` on ``backend`` with the weights it holds."""
        self.ahead = Ahead(step, list(prompts), list(jobs), backend.submit(jobs, sampling_seed=sampling_seed))

    def take(self, step: int, prompts: Sequence[str], backend: Any) -> Optional[list[RolloutRecord]]:
        """The records played ahead for ``step`` (waiting for them), or None: nothing ahead, or a batch for other
        prompts (finished and dropped, with a warning)."""
        ahead, self.ahead = self.ahead, None
        if ahead is None:
            return None
        records = ahead.finish(backend)
        if ahead.step != step or ahead.prompts != list(prompts):
            logger.warning("the batch played ahead was for step %d and other prompts than step %d's; "
                           "playing step %d on-policy", ahead.step, step, step)
            return None
        return records

    def save(self, checkpoint: Path, backend: Any) -> None:
        """Finish the batch in flight and write it into ``checkpoint`` (nothing when none is ahead)."""
        if self.ahead is None:
            return
        self.ahead.finish(backend)
        saved = Ahead(self.ahead.step, self.ahead.prompts, self.ahead.jobs, None, self.ahead.records)
        (checkpoint / AHEAD_FILE).write_bytes(pickle.dumps(saved, protocol=pickle.HIGHEST_PROTOCOL))

    def load(self, checkpoint: Path) -> None:
        """Hold the batch ``checkpoint`` saved ahead (none when it has no ``AHEAD_FILE``)."""
        path = checkpoint / AHEAD_FILE
        self.ahead = pickle.loads(path.read_bytes()) if path.is_file() else None


def check_staleness(records: Sequence[RolloutRecord], step: int, max_staleness: int) -> None:
    """Raise unless every record was played with weights of step ``step - max_staleness`` .. ``step``."""
    bad = [r.job.job_id for r in records if not 0 <= step - r.weights_version <= max_staleness]
    if bad:
        versions = sorted({r.weights_version for r in records})
        raise RuntimeError(f"step {step} got episodes played with weights versions {versions} "
                           f"(rollout.max_staleness={max_staleness}; jobs {bad[:5]}): refusing to train on them")


def staleness_metrics(records: Sequence[RolloutRecord], step: int, fetch_began_at: float) -> dict[str, float]:
    """``rollout/staleness_mean`` and ``_max`` (step minus the weights version, over the batch); ``time/play_s``
    (the longest worker call that played it) and ``time/overlap_s`` (how long it was being played before this step
    asked for it: 0 for a batch played on demand)."""
    lags = [step - r.weights_version for r in records]
    timings = [r.timing for r in records if r.timing]
    started = min((t["started_at"] for t in timings if "started_at" in t), default=fetch_began_at)
    return {"rollout/staleness_mean": sum(lags) / max(1, len(lags)), "rollout/staleness_max": float(max(lags, default=0)),
            "time/play_s": max((t.get("total_s", 0.0) for t in timings), default=0.0),
            "time/overlap_s": max(0.0, fetch_began_at - started)}


class SaveAheadCallback(TrainerCallback):
    """Writes the batch played ahead into each checkpoint (main process; before the manifest seals it)."""

    def __init__(self, rollouts: Any) -> None:
        self.rollouts = rollouts

    def on_save(self, args, state, control, **kwargs):
        ahead = getattr(self.rollouts, "ahead", None)
        if state.is_world_process_zero and ahead is not None:
            ahead.save(Path(args.output_dir) / f"{CHECKPOINT_PREFIX}{state.global_step}", self.rollouts.collector)
