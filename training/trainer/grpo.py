"""The TRL glue (the only module that imports trl): GRPO with a rollout function that plays
ReplicaLab episodes on a rollout backend.

Each dataset row names one (seed, role, template, difficulty) from the training split; TRL repeats
it ``num_generations`` times, so every GRPO group is G episodes of one scenario, one role and one
opponent, and advantages never mix roles.  The reward is the seat's own role's reward
(``EpisodeLog.role_rewards``: the judge's total for the Scientist, the lab's own reward for the Lab
Manager), passed through from the rollout; every component is logged by ``RunLogger``.

Exact scoring (``ReplicaLabGRPOTrainer``): TRL 1.16 scores completions without position ids, which shifts
an absolute-position model's positions in a left-padded batch; the subclass passes position ids from the
attention mask, ``disable_dropout`` keeps dropout off, and every step logs how far the trainer's log-probs
of the sampled tokens are from the rollout's (``mismatch/<role>/abs_diff``, ``mismatch/<role>/kl``).  Every
scoring without gradients (old, reference and mismatch log-probs) runs in chunks of ``grpo.rescore_batch_size``
sequences; TRL loads the weights as ``dtype`` says (``grpo_config``).
With ``grpo.advantage: role_baseline`` the advantage is the reward minus a running baseline of its role
(``training.trainer.advantages``) instead of the group mean.
With ``grpo.rollout_correction_clip`` each model token's term of the loss is reweighted by its truncated
importance weight ``min(clip, exp(trainer - rollout log-prob))`` (``rollout_correction``: per-token advantages,
which TRL's loss accepts; ``rollout_correction/mean`` over model tokens and the share clipped,
``rollout_correction/clipped``): about 1 for an exact engine on-policy, the correction of a batch played with
older weights (``rollout.max_staleness``, ``training.trainer.ahead``) or by an engine that drifts.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any, Optional, Sequence

import torch
from datasets import Dataset
from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from replicalab.metrics import episode_metrics
from training.config.train import CheckpointConfig, GRPOParams, LoraConfig
from training.config.branch import BranchConfig
from training.rollout.branch import BranchCollector, branch_metrics
from training.rollout.contract import Backend
from training.rollout.records import EpisodeJob, RolloutRecord
from training.tracking import RunLogger
from training.trainer.advantages import RoleBaseline
from training.trainer.ahead import RolloutsAhead, SaveAheadCallback, check_staleness, staleness_metrics
from training.trainer.distributed import gather_to_main, scatter_from_main
from training.trainer.grad_guard import NonFiniteGradGuard
from training.trainer.pool import OpponentPool
from training.trainer.weights import lora_peft_config, payload_bytes, trainer_weights

REWARD_KEY = "role_reward"
STEP_SEED_STRIDE = 1_000_003
#: Prefix of the periodic validation check's metrics (what sweeps and selection read).
#: Mean absolute rollout-vs-trainer log-prob difference (nats per model token) above which a step warns.
MISMATCH_WARN_NATS = 1e-2

logger = logging.getLogger(__name__)


def job_key(row: dict) -> str:
    """The prompt string TRL carries for a row: the episode it stands for."""
    return json.dumps({k: row[k] for k in ("seed", "role", "template", "difficulty")}, sort_keys=True)


def build_dataset(rows: Sequence[dict]) -> Dataset:
    """The run's dataset: its rows (``training.trainer.data.train_rows``), in order.  TRL plays them in this
    order (``shuffle_dataset=False`` in ``grpo_config``: its shuffle is a permutation of the whole dataset,
    so it would depend on ``max_steps``); row ``i`` depends only on the run's seed and ``i``, so resuming with
    a larger ``grpo.max_steps`` continues the same data order."""
    return Dataset.from_list([{"prompt": job_key(r), **r} for r in rows])


def role_reward(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
    """GRPO reward: each episode's reward of the role the group trains (``RoleTrajectory.reward``), computed
    in the rollout."""
    return [float(x) for x in kwargs[REWARD_KEY]]


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
        self.collector = backend if branch is None or backend is None else BranchCollector(
            backend, other_share=branch.other_share, reply_only=branch.tokens == "reply",
            reply_temperature=branch.temperature)
        self.num_generations, self.seed, self.max_staleness = num_generations, seed, max_staleness
        # rollout.max_staleness=1: the next step's batch in flight (training.trainer.ahead; keys: the rows' prompts)
        self.ahead = RolloutsAhead(keys) if max_staleness > 0 else None
        self.episodes_played = 0
        self._resumed_at: Optional[int] = None  # the first step after a resume: the restored snapshots go out

    def resume(self, step: int) -> None:
        """The run continues after ``step`` (the pool's snapshots, restored from that checkpoint, are sent with the
        next step's weights)."""
        self._resumed_at = step

    def __call__(self, prompts: Sequence[str], trainer: GRPOTrainer) -> dict[str, list]:
        step = trainer.state.global_step
        tick = time.perf_counter()
        state = trainer_weights(trainer, self.lora)
        per_process = gather_to_main(list(prompts))
        parts = None if per_process is None else self._play(step, state, per_process, time.perf_counter() - tick)
        return scatter_from_main(parts)

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
            })
        return parts


class _WithPositionIds:
    """Calls ``model`` with position ids counted over the attention mask (left padding gets position 0,
    the first real token too), as ``generate`` does; everything else passes through."""

    def __init__(self, model: Any):
        self.model = model

    def __call__(self, *args: Any, attention_mask: torch.Tensor, **kwargs: Any) -> Any:
        position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        return self.model(*args, attention_mask=attention_mask, position_ids=position_ids, **kwargs)


def mismatch_sums(rollout: torch.Tensor, trainer: torch.Tensor, mask: torch.Tensor,
                  roles: Sequence[str]) -> dict[str, tuple[float, float, float]]:
    """Per role: the sums over model tokens of |trainer - rollout| log-prob and of the k3 estimate of
    KL(sampling || trainer) (``exp(d) - 1 - d`` with ``d = trainer - rollout``), and the token count."""
    out: dict[str, tuple[float, float, float]] = {}
    diff = (trainer.double() - rollout.double()) * mask
    for role in sorted(set(roles)):
        rows = torch.tensor([r == role for r in roles], device=mask.device)
        m, d = mask[rows].double(), diff[rows]
        out[role] = (float((d.abs() * m).sum()), float(((torch.exp(d) - 1 - d) * m).sum()), float(m.sum()))
    return out


def mismatch_metrics(per_process: Sequence[dict[str, tuple[float, float, float]]]) -> dict[str, float]:
    """``mismatch/<role>/abs_diff`` and ``mismatch/<role>/kl``: means per model token over every learner
    process's ``mismatch_sums``."""
    out: dict[str, float] = {}
    for role in sorted(set().union(*per_process)):
        abs_sum, kl_sum, n = (sum(part[role][i] for part in per_process if role in part) for i in range(3))
        out[f"mismatch/{role}/abs_diff"] = abs_sum / max(n, 1.0)
        out[f"mismatch/{role}/kl"] = kl_sum / max(n, 1.0)
    return out


def rollout_correction(rollout: torch.Tensor, trainer: torch.Tensor, mask: torch.Tensor, clip: float) -> torch.Tensor:
    """Per token: ``min(clip, exp(trainer - rollout log-prob))`` on model tokens, 1 elsewhere: the truncated
    importance weight of each token the rollout engine (or older weights) sampled, under the trainer's policy
    (verl's token-level truncated IS)."""
    log_ratio = torch.nan_to_num((trainer.double() - rollout.double()) * mask, nan=0.0)
    return torch.exp(log_ratio).clamp(max=clip).detach()


def correction_sums(weights: torch.Tensor, mask: torch.Tensor, clip: float) -> tuple[float, float, float]:
    """The sum of the per-token weights over model tokens, how many of them were clipped, and the token count."""
    m = mask.bool()
    return float(weights[m].sum()), float((weights[m] >= clip).sum()), float(m.sum())


class ReplicaLabGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` that scores with position ids from the attention mask and logs the rollout-vs-trainer
    log-prob mismatch of every generation batch (through ``metric_sink(step, metrics)``)."""

    metric_sink = None
    #: ``grpo.rollout_correction_clip`` (None: advantages are not reweighted).
    rollout_correction_clip: Optional[float] = None
    #: ``grpo.advantage: role_baseline``: the running baseline per role (None: GRPO's group advantage).
    role_baseline: Optional[RoleBaseline] = None

    #: ``rollout.max_staleness``: the batches may come from older weights (no mismatch warning then).
    max_staleness: int = 0

    #: Sequences per forward pass when re-scoring without gradients (``grpo.rescore_batch_size``; None: TRL's
    #: per-process micro-batch).
    rescore_batch_size: Optional[int] = None

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, *args, **kwargs):
        if not torch.is_grad_enabled():  # re-scoring (old, reference, mismatch log-probs): chunked
            kwargs["batch_size"] = self.rescore_batch_size or kwargs.get("batch_size") or \
                self.args.per_device_train_batch_size
        return super()._get_per_token_logps_and_entropies(
            _WithPositionIds(model), input_ids, attention_mask, *args, **kwargs)

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        if self.role_baseline is not None:
            output["advantages"] = self._role_advantages(inputs).to(output["advantages"])
        rollout = output.get("sampling_per_token_logps")
        if rollout is None:
            return output
        mask = output["completion_mask"] * output.get("tool_mask", 1)
        trainer = output.get("old_per_token_logps")
        if trainer is None:
            ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
            attention = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
            with torch.no_grad():
                trainer, _, _ = self._get_per_token_logps_and_entropies(
                    self.model, ids, attention, output["completion_ids"].size(1))
        sums = mismatch_sums(rollout, trainer, mask, [row["role"] for row in inputs])
        clip, weights = self.rollout_correction_clip, None
        if clip is not None:  # per-token advantages (B, T): TRL's loss multiplies each token's term by its own
            ratio = rollout_correction(rollout, trainer, mask, clip)
            advantages = output["advantages"]
            advantages = advantages.unsqueeze(1) if advantages.dim() == 1 else advantages
            output["advantages"] = advantages * ratio.to(advantages.dtype)
            weights = correction_sums(ratio, mask, clip)
        per_process = gather_to_main((sums, weights))  # each learner process scored its own share of the batch
        if per_process is None:
            return output
        metrics = mismatch_metrics([part_sums for part_sums, _ in per_process])
        if clip is not None:
            total, clipped, n = (sum(part[i] for _, part in per_process) for i in range(3))
            metrics.update({"rollout_correction/mean": total / max(n, 1.0),
                            "rollout_correction/clipped": clipped / max(n, 1.0)})
        worst = max(v for k, v in metrics.items() if k.endswith("/abs_diff"))
        if worst > MISMATCH_WARN_NATS and not self.max_staleness:  # older weights differ by design
            logger.warning("rollout and trainer log-probs differ by %.3g nats per token (threshold %g): %s",
                           worst, MISMATCH_WARN_NATS, metrics)
        if self.metric_sink is not None:
            self.metric_sink(self.state.global_step, metrics)
        return output

    def _role_advantages(self, inputs) -> torch.Tensor:
        """This process's share of the step's advantages under the role baseline: every process gathers the
        whole step's rewards and roles (in process order) and updates the same baselines."""
        from accelerate.utils import gather_object

        local = [(float(row[REWARD_KEY]), row["role"]) for row in inputs]
        everyone = gather_object(local) if self.accelerator.num_processes > 1 else local
        advantages = self.role_baseline.advantages([r for r, _ in everyone], [role for _, role in everyone])
        start = self.accelerator.process_index * len(local)
        return torch.tensor(advantages[start:start + len(local)], dtype=torch.float32)


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


class LoggerCallback(TrainerCallback):
    """Forward TRL's scalars (loss, KL, clip ratios, lr...) to the run logger, with the step's time
    left after weight sync and rollout as ``time/optimizer_s``; checkpoints as artifacts."""

    def __init__(self, logger: RunLogger, rollouts: "EpisodeRollouts"):
        self.logger, self.rollouts = logger, rollouts
        self.step_start = 0.0

    def on_step_begin(self, args, state, control, **kwargs):
        self.step_start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        t = getattr(self.rollouts, "last_timing", None)
        if t:
            step_s = time.perf_counter() - self.step_start
            self.logger.log(state.global_step, {"time/step_s": step_s, "time/optimizer_s": max(
                0.0, step_s - t["time/weight_sync_s"] - t["time/rollout_s"])})

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs:
            scalars = {f"train/{k}": float(v) for k, v in logs.items() if isinstance(v, (int, float))}
            self.logger.log(state.global_step, scalars)

    def on_save(self, args, state, control, **kwargs):
        path = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if path.exists():
            self.logger.log_artifact(path, name=f"checkpoint-{state.global_step}", type="model")


def grpo_config(grpo: GRPOParams, *, output_dir: Path, batch_per_process: int, temperature: float, seed: int,
                checkpoint: CheckpointConfig, use_cpu: bool, bf16: bool, dtype: str = "float32",
                sharding: Optional[dict[str, Any]] = None) -> GRPOConfig:
    """TRL's config: ``grpo``'s hyperparameters, ``batch_per_process`` episodes per learner process and
    micro-step (the global batch stays ``grpo.episodes_per_step``), checkpoints into ``output_dir``, the weights
    (and the reference model's) loaded as ``dtype``;
    ``sharding``: the learner's FSDP/DeepSpeed keywords and timeout (``training.trainer.sharding``)."""
    g = grpo
    return GRPOConfig(
        output_dir=str(output_dir),
        per_device_train_batch_size=batch_per_process,
        gradient_accumulation_steps=g.gradient_accumulation_steps,
        gradient_checkpointing=g.gradient_checkpointing,
        num_generations=g.num_generations,
        # TRL rescales the logits it scores with by this; it must be the rollouts' temperature.
        temperature=temperature,
        disable_dropout=True,  # score exactly what was sampled (rollouts run in eval mode)
        max_steps=g.max_steps,
        learning_rate=g.learning_rate,
        lr_scheduler_type=g.lr_scheduler_type,
        warmup_steps=g.warmup_ratio,  # a float below 1 is a ratio of max_steps
        weight_decay=g.weight_decay,
        max_grad_norm=g.max_grad_norm,
        beta=g.beta,
        loss_type=g.loss_type,
        epsilon=g.epsilon,
        epsilon_high=g.epsilon_high,
        num_iterations=g.num_iterations,
        scale_rewards=g.scale_rewards,
        importance_sampling_level=g.importance_sampling_level,
        max_completion_length=g.max_completion_length,
        save_strategy="steps",
        save_steps=checkpoint.save_steps,
        save_total_limit=checkpoint.save_total_limit,
        logging_steps=1,
        report_to="none",
        seed=seed,
        data_seed=seed,
        use_cpu=use_cpu,
        bf16=bf16,
        model_init_kwargs={"dtype": dtype},  # TRL's default is float32 too; explicit, as the planner counts it
        shuffle_dataset=False,  # the order is the row stream's, independent of max_steps
        disable_tqdm=False,
        **(sharding or {}),
    )


def build_trainer(model_dir: Path, *, args: GRPOConfig, rows: Sequence[dict], rollouts: EpisodeRollouts,
                  validation: TrainerCallback, logger: RunLogger, lora: LoraConfig,
                  rollout_correction_clip: Optional[float], role_baseline: Optional[RoleBaseline] = None,
                  extra_callbacks: Sequence[TrainerCallback] = (), chat_template: str | None = None,
                  rescore_batch_size: Optional[int] = None) -> GRPOTrainer:
    """The GRPO trainer of a run (``training.trainer.build.make_trainer`` assembles its parts from the config).
    With several learner processes every process builds one; the rollouts, validation and logger of the
    processes other than the main one hold no backend and a ``NullRunLogger``."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    if chat_template and not tokenizer.chat_template:
        tokenizer.chat_template = chat_template
    trainer = ReplicaLabGRPOTrainer(
        model=str(model_dir),
        reward_funcs=[role_reward],
        args=args,
        train_dataset=build_dataset(rows),
        processing_class=tokenizer,
        rollout_func=rollouts,
        peft_config=lora_peft_config(lora),
        callbacks=[NonFiniteGradGuard(logger.log), LoggerCallback(logger, rollouts), validation,
                   *([role_baseline] if role_baseline is not None else []), *extra_callbacks,
                   *([SaveAheadCallback(rollouts)] if rollouts.ahead is not None else [])],
    )
    validation.trainer = trainer
    trainer.metric_sink = logger.log
    trainer.rollout_correction_clip = rollout_correction_clip
    trainer.rescore_batch_size = rescore_batch_size
    trainer.max_staleness = rollouts.max_staleness
    trainer.role_baseline = role_baseline
    return trainer
