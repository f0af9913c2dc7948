"""The learner: ``run`` (``replicalab train``: config -> trained checkpoint), ``grpo`` (the TRL glue, the
only code that imports trl: a ``rollout_func`` that plays episodes on a rollout backend, callbacks),
``grad_guard`` (skips non-finite gradient steps) and ``checkpoints`` (finding a run's checkpoints).
"""
