"""The learner: ``run`` (``replicalab train``: config -> trained checkpoint), ``build`` (the one place a
``TrainConfig`` becomes the run's objects), ``data`` (the training rows), ``grpo`` (the TRL glue: TRL's
config and the trainer of a run), ``grpo_trainer`` (the ``GRPOTrainer`` subclass), ``grpo_maths`` (its
arithmetic, pure functions), ``rollouts`` (the ``rollout_func`` that plays episodes on a rollout backend),
``logger_callback`` (TRL's scalars into the run logger), ``weights``
(what the workers load each step), ``distributed`` (the learner's processes under torchrun), ``grad_guard``
(skips non-finite gradient steps), ``checkpoints`` (sealed checkpoints, resume), ``interrupt`` (stop on a
signal), ``curve`` (the learning curve), ``validation`` (every trained seat against fixed opponents),
``advantages`` (the per-role baseline), ``pool`` (opponent pools and snapshots) and ``export`` (``final/``).
"""
