"""TRL's ``rollout_func``: each step ships the learner's weights, plays the step's episodes on the rollout
backend and hands TRL one token record per episode.

Each dataset row is one (seed, role, template, difficulty) of the training split, carried by TRL as its prompt
string (``job_key``); TRL repeats it ``num_generations`` times, so every GRPO group is G episodes of one
scenario, one role and one opponent.  The reward of an episode is its seat's own role's reward
(``RoleTrajectory.reward``), returned under ``REWARD_KEY``.  Step ``t`` samples with seed
``seed * STEP_SEED_STRIDE + t``, so a resumed run plays the episodes it would have played.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence

from replicalab.metrics import episode_metrics
from training.config.branch import BranchConfig
from training.config.lora import LoraConfig
from training.rollout.branch import BranchCollector, branch_metrics
from training.rollout.contract import Backend
from training.rollout.records import EpisodeJob, RolloutRecord
from training.tracking import RunLogger
from training.trainer.rollouts_ahead import RolloutsAhead, check_staleness, staleness_metrics
from training.trainer.distributed import gather_to_main, scatter_from_main
from training.trainer.pool import OpponentPool
from training.trainer.weights import payload_bytes, trainer_weights

if TYPE_CHECKING:
    from trl import GRPOTrainer

#: The column of the rollout's output that holds each episode's role reward (read by ``role_reward``).
REWARD_KEY = "role_reward"
#: The rollout's per-row grammar keys (taken out of the batch TRL sees: ``EpisodeRollouts.last_grammars``).
GRAMMARS_KEY = "grammars"
#: Step ``t``'s sampling seed is ``seed * STEP_SEED_STRIDE + t``.
STEP_SEED_STRIDE = 1_000_003


def job_key(row: dict) -> str:
    """The prompt string TRL carries for a row: the episode it stands for."""
    return json.dumps({k: row[k] for k in ("seed", "role", "template", "difficulty")}, sort_keys=True)


class EpisodeRollouts:
    """TRL ``rollout_func``: ship the current weights, play the batch's episodes, return token records.

    With several learner processes, each passes its share of the step's rows; the main process gathers
    them in rank order, plays them all in one ``collect`` (one backend, one sampling seed per step, job
    ids unique over the step) and hands each process back its share, so the episodes of a step are the
    same whatever the number of processes."""

    def __init__(self, backend: Optional[Backend], logger: RunLogger, *, num_generations: int, seed: int,
                 lora: LoraConfig, pool: Optional[OpponentPool] = None, max_staleness: int = 0,
                 keys: Sequence[str] = (), branch: Optional[BranchConfig] = None):
        self.backend, self.logger, self.lora, self.pool = backend, logger, lora, pool
        # grpo.group_by=turn: each group's episodes branch from one decision state of a trunk (training.rollout.branch)
        self.collector = backend if branch is None or backend is None else BranchCollector.from_config(backend, branch)
        self.num_generations, self.seed, self.max_staleness = num_generations, seed, max_staleness
        # rollout.max_staleness=1: the next step's batch in flight (training.trainer.rollouts_ahead; keys: the rows'
        # prompts)
        self.ahead = RolloutsAhead(keys) if max_staleness > 0 else None
        self.episodes_played = 0
        self.last_timing: dict[str, float] = {}  # the last step's weight sync and rollout times
        self.last_env_mask: list[list[int]] = []  # this process's rows of the last batch: which tokens are the model's
        self.last_grammars: list[str] = []  # ... and the grammar keys their replies were decoded under
        self._resumed_at: Optional[int] = None  # the first step after a resume: the restored snapshots go out

    def resume(self, checkpoint: Path, step: int, episodes_played: int) -> None:
        """The run continues after ``step`` from ``checkpoint``: ``episodes_played`` so far, the batch played
        ahead as it was (``rollout.max_staleness``), the opponents' snapshots as they were (sent with the next
        step's weights)."""
        self.episodes_played = episodes_played
        if self.ahead is not None:
            self.ahead.load(checkpoint)
        if self.pool is not None:
            self.pool.load(checkpoint)
            self._resumed_at = step

    def __call__(self, prompts: Sequence[str], trainer: "GRPOTrainer") -> dict[str, list]:
        step = trainer.state.global_step
        tick = time.perf_counter()
        state = trainer_weights(trainer, self.lora)
        per_process = gather_to_main(list(prompts))
        parts = None if per_process is None else self._play(step, state, per_process, time.perf_counter() - tick)
        part = scatter_from_main(parts)
        self.last_grammars = part.pop(GRAMMARS_KEY)  # this process's rows' (a constrained batch's scoring reads them)
        self.last_env_mask = part["env_mask"]
        return part

    def _jobs(self, step: int, prompts: Sequence[str]) -> list[EpisodeJob]:
        """Step ``step``'s episodes: one job per prompt, groups of ``num_generations``, opponents drawn."""
        g = self.num_generations
        jobs = [EpisodeJob(job_id=i, group=i // g, **json.loads(p)) for i, p in enumerate(prompts)]
        return self.pool.assign(jobs, step) if self.pool is not None else jobs

    def _play(self, step: int, state: dict[str, Any], per_process: list[list[str]],
              gather_s: float) -> list[dict[str, list]]:
        prompts = [p for share in per_process for p in share]
        fetch_began_at, tick = time.time(), time.perf_counter()
        records = self.ahead.take(step, prompts, self.collector) if self.ahead is not None else None
        rollout_s = time.perf_counter() - tick  # waiting for the batch played ahead
        tick = time.perf_counter()
        self.backend.set_weights(state, step)
        if self.pool is not None and (self.pool.take_snapshot(step, state) or step == self._resumed_at):
            self.backend.set_snapshots(self.pool.snapshot_states())
        sync_s = gather_s + time.perf_counter() - tick
        sync_bytes = payload_bytes(state)
        if records is None:  # on-policy: played now, with this step's weights
            jobs = self._jobs(step, prompts)
            tick = time.perf_counter()
            records = self.collector.collect(jobs, sampling_seed=self.seed * STEP_SEED_STRIDE + step)
            rollout_s += time.perf_counter() - tick
            if [r.job.job_id for r in records] != [j.job_id for j in jobs]:
                raise RuntimeError("rollout returned missing or reordered episodes")
        check_staleness(records, step, self.max_staleness)
        upcoming = self.ahead.next_prompts(prompts) if self.ahead is not None else None
        if upcoming is not None:  # the next step's batch plays while the learner trains on this one
            self.ahead.submit(step + 1, upcoming, self._jobs(step + 1, upcoming), self.collector,
                              self.seed * STEP_SEED_STRIDE + step + 1)
        pool_metrics = self.pool.metrics([r.job for r in records]) if self.pool is not None else {}
        self.last_timing = _step_timing(records, sync_s, rollout_s)
        self.episodes_played += len(records)
        logs = [r.log for r in records]
        self.logger.log(step, {**episode_metrics(logs), "rollout/episodes_total": self.episodes_played,
                               **_trajectory_metrics(records), **self.last_timing, **pool_metrics,
                               **staleness_metrics(records, step, fetch_began_at), **branch_metrics(records),
                               "rollout/weight_sync_bytes": float(sync_bytes)})
        self.logger.log_episodes(step, logs, roles=[r.job.role for r in records])
        parts, start = [], 0
        for share in per_process:
            trajectories = [r.trajectory for r in records[start:start + len(share)]]
            start += len(share)
            parts.append({
                "prompt_ids": [t.prompt_ids for t in trajectories],
                "completion_ids": [t.completion_ids for t in trajectories],
                "logprobs": [t.logprobs for t in trajectories],
                "env_mask": [t.env_mask for t in trajectories],
                REWARD_KEY: [t.reward for t in trajectories],
                GRAMMARS_KEY: [t.grammar for t in trajectories],
            })
        return parts


def _step_timing(records: Sequence[RolloutRecord], sync_s: float, rollout_s: float) -> dict[str, float]:
    """Split the rollout's wall time into generation and environment (incl. parsing and Ray) by the
    workers' own share of time spent inside generation."""
    shards = {(r.worker, r.timing.get("total_s")): r.timing for r in records if r.timing}
    total = sum(x["total_s"] for x in shards.values()) or 1.0
    share = sum(x["generate_s"] for x in shards.values()) / total
    return {"time/weight_sync_s": sync_s, "time/rollout_s": rollout_s, "time/generation_s": rollout_s * share,
            "time/environment_s": rollout_s * (1 - share)}


def _trajectory_metrics(records: Sequence[RolloutRecord]) -> dict[str, float]:
    ts = [r.trajectory for r in records]
    model_tokens = sum(sum(t.env_mask) for t in ts)
    turns = sum(t.turns for t in ts)
    return {
        "rollout/model_tokens": float(model_tokens),
        "rollout/trajectory_tokens_max": float(max(len(t.completion_ids) for t in ts)),
        "rollout/model_parse_failure_rate": sum(t.parse_failures for t in ts) / max(1, turns),
    }
