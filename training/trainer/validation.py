"""The periodic validation check of a training run: every trained seat against fixed opponents on validation seeds."""

from __future__ import annotations

from typing import Optional, Sequence

from transformers import TrainerCallback

from replicalab.metrics import episode_metrics, role_reward
from training.config.sweep import VALIDATION_PREFIX
from training.config.lora import LoraConfig
from training.rollout.contract import Backend
from training.rollout.records import EpisodeJob, RolloutRecord
from training.tracking import RunLogger
from training.trainer.weights import trainer_weights


class ValidationCallback(TrainerCallback):
    """At step 0 and every ``every_steps`` steps: the current weights play ``jobs`` (a slice of ``VALIDATION_SEEDS``, the
    same each time, for every trained seat and fixed opponent: ``validation_jobs``) sampled with ``seed``,
    logged as ``val/*`` (the Scientist's episodes against its first opponent) and ``val/<role>/...`` per seat
    (``seat_metrics``).  Evaluation only: no gradient sees these episodes, and no test seed is ever played
    here.  ``every_steps=0`` turns it off."""

    def __init__(self, backend: Optional[Backend], logger: RunLogger, *, jobs: Sequence[EpisodeJob],
                 every_steps: int, seed: int, lora: LoraConfig):
        self.backend, self.logger, self.lora = backend, logger, lora
        self.jobs, self.every_steps, self.seed = list(jobs), every_steps, seed
        self.trainer = None  # set by build_trainer (the weights are gathered from it)

    def on_train_begin(self, args, state, control, **kwargs):
        if state.global_step == 0:  # the starting point of the curve (a resumed run has logged it already)
            self._check(state.global_step)

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step % max(1, self.every_steps) == 0:
            self._check(state.global_step)

    def _check(self, step: int) -> None:
        if not self.every_steps or not self.jobs:
            return
        weights = trainer_weights(self.trainer, self.lora)  # every process; the main one plays
        if weights is None:
            return
        self.backend.set_weights(weights, step)
        records = self.backend.collect(self.jobs, sampling_seed=self.seed)
        first = records[0].job.opponent
        scientist = [r.log for r in records if r.job.role == "scientist" and r.job.opponent == first]
        metrics = {f"{VALIDATION_PREFIX}{k}": v for k, v in episode_metrics(scientist).items()}
        self.logger.log(step, {**metrics, **seat_metrics(records)})


def seat_metrics(records: Sequence[RolloutRecord]) -> dict[str, float]:
    """Per trained seat (the records' ``job.role``): its own reward, agreement and parse failures over all its
    validation episodes, and its reward against each opponent (``val/<role>/vs/<opponent>/reward``)."""
    out: dict[str, float] = {}
    for role in dict.fromkeys(r.job.role for r in records):
        mine = [r for r in records if r.job.role == role]
        turns = [t for r in mine for t in r.log.turns if t.role == role]
        prefix = f"{VALIDATION_PREFIX}{role}/"
        out[prefix + "reward"] = sum(role_reward(r.log, role) for r in mine) / len(mine)
        out[prefix + "agreement_rate"] = sum(r.log.agreement_reached for r in mine) / len(mine)
        out[prefix + "parse_failure_rate"] = sum(t.action is None for t in turns) / max(1, len(turns))
        for opponent in dict.fromkeys(r.job.opponent for r in mine):
            against = [role_reward(r.log, role) for r in mine if r.job.opponent == opponent]
            out[f"{prefix}vs/{opponent}/reward"] = sum(against) / len(against)
    return out


