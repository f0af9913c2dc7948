"""GRPO's TRL glue: TRL's ``GRPOConfig`` of a run (``grpo_config``) and its ``ReplicaLabGRPOTrainer``
(``build_trainer``), with a rollout function that plays ReplicaLab episodes on a rollout backend.

trl is imported here, in ``training.trainer.grpo_trainer`` (the ``GRPOTrainer`` subclass) and in
``training.model.sft`` (the supervised warm start).  The parts live apart:

- ``training.trainer.rollouts``: ``EpisodeRollouts``, TRL's ``rollout_func`` (the dataset rows' prompt strings,
  ``job_key``, and the reward column, ``REWARD_KEY``);
- ``training.trainer.grpo_trainer``: ``ReplicaLabGRPOTrainer`` (exact scoring, the rollout-vs-trainer mismatch,
  the role baseline, the rollout correction), everything it needs passed to its constructor;
- ``training.trainer.grpo_maths``: the arithmetic of those, as pure functions;
- ``training.trainer.logger_callback``: TRL's scalars, step times and checkpoints into the run logger;
- ``training.model.trainer_args``: the keywords ``GRPOConfig`` shares with the warm start's ``SFTConfig``.

Each dataset row names one (seed, role, template, difficulty) from the training split; TRL repeats it
``num_generations`` times, so every GRPO group is G episodes of one scenario, one role and one opponent, and
advantages never mix roles.  The reward is the seat's own role's reward (``EpisodeLog.role_rewards``: the
judge's total for the Scientist, the lab's own reward for the Lab Manager), passed through from the rollout;
every component is logged by ``RunLogger``.  TRL loads the weights as ``dtype`` says (``grpo_config``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Sequence

from datasets import Dataset
from transformers import TrainerCallback
from trl import GRPOConfig

from training.config.checkpoint import CheckpointConfig
from training.config.grpo import ROLE_SCALE, GRPOParams
from training.config.lora import LoraConfig
from training.model.trainer_args import common_trainer_args
from training.tracking import RunLogger
from training.trainer.advantages import RoleBaseline
from training.trainer.rollouts_ahead import SaveAheadCallback
from training.trainer.grad_guard import NonFiniteGradGuard
from training.trainer.grpo_trainer import ReplicaLabGRPOTrainer
from training.trainer.logger_callback import LoggerCallback
from training.trainer.rollouts import REWARD_KEY, EpisodeRollouts, job_key
from training.trainer.weights import lora_peft_config


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


def grpo_config(grpo: GRPOParams, *, output_dir: Path, batch_per_process: int, temperature: float, seed: int,
                checkpoint: CheckpointConfig, use_cpu: bool, bf16: bool, dtype: str = "float32",
                sharding: Optional[dict[str, Any]] = None) -> GRPOConfig:
    """TRL's config: ``grpo``'s hyperparameters, ``batch_per_process`` episodes per learner process and
    micro-step (the global batch stays ``grpo.episodes_per_step``), checkpoints into ``output_dir``, the weights
    (and the reference model's) loaded as ``dtype``;
    ``sharding``: the learner's FSDP/DeepSpeed keywords and timeout (``training.trainer.sharding``)."""
    g = grpo
    return GRPOConfig(
        **common_trainer_args(g, output_dir=str(output_dir), max_steps=g.max_steps,
                              batch_per_process=batch_per_process, seed=seed, use_cpu=use_cpu, bf16=bf16,
                              gradient_checkpointing=g.gradient_checkpointing, logging_steps=1, progress=True),
        num_generations=g.num_generations,
        # TRL rescales the logits it scores with by this; it must be the rollouts' temperature.
        temperature=temperature,
        disable_dropout=True,  # score exactly what was sampled (rollouts run in eval mode)
        max_grad_norm=g.max_grad_norm,
        beta=g.beta,
        loss_type=g.loss_type,
        epsilon=g.epsilon,
        epsilon_high=g.epsilon_high,
        num_iterations=g.num_iterations,
        scale_rewards="none" if g.scale_rewards == ROLE_SCALE else g.scale_rewards,  # role: ours, after TRL's
        importance_sampling_level=g.importance_sampling_level,
        max_completion_length=g.max_completion_length,
        save_strategy="steps",
        save_steps=checkpoint.save_steps,
        save_total_limit=checkpoint.save_total_limit,
        data_seed=seed,
        model_init_kwargs={"dtype": dtype},  # TRL's default is float32 too; explicit, as the planner counts it
        shuffle_dataset=False,  # the order is the row stream's, independent of max_steps
        **(sharding or {}),
    )


def build_trainer(model_dir: Path, *, args: GRPOConfig, rows: Sequence[dict], rollouts: EpisodeRollouts,
                  validation: TrainerCallback, logger: RunLogger, lora: LoraConfig,
                  rollout_correction_clip: Optional[float], role_baseline: Optional[RoleBaseline] = None,
                  extra_callbacks: Sequence[TrainerCallback] = (), chat_template: str | None = None,
                  rescore_batch_size: Optional[int] = None, constrained: bool = False,
                  scale_by_role: bool = False) -> ReplicaLabGRPOTrainer:
    """The GRPO trainer of a run (``training.trainer.build.make_trainer`` assembles its parts from the config).
    With several learner processes every process builds one; the rollouts, validation and logger of the
    processes other than the main one hold no backend and a ``NullRunLogger``.  ``constrained``
    (``rollout.sampling.constrained``): the trainer scores under the action grammars the rollouts decoded with;
    ``scale_by_role`` (``grpo.scale_rewards: role``): it scales the advantages per role."""
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
        metric_sink=logger.log,
        rollout_correction_clip=rollout_correction_clip,
        role_baseline=role_baseline,
        max_staleness=rollouts.max_staleness,
        rescore_batch_size=rescore_batch_size,
        scale_by_role=scale_by_role,
    )
    validation.trainer = trainer  # the validation check gathers the weights it plays with from the trainer
    if constrained:
        trainer.grammar = trainer_grammar(trainer, tokenizer)
    return trainer


def trainer_grammar(trainer: ReplicaLabGRPOTrainer, tokenizer: Any):
    """The action grammars of the trainer's model and tokenizer: the rollouts' (the same stop tokens and logits
    width as ``PolicyModel``)."""
    from training.rollout.grammar import ActionGrammar, vocab_width
    from training.rollout.policy import stop_tokens

    model = trainer.accelerator.unwrap_model(trainer.model)
    return ActionGrammar(tokenizer, stop_tokens(model.generation_config, tokenizer), vocab_width(model))
