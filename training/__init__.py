"""ReplicaLab's training pipeline: everything that needs torch, transformers, trl, ray or wandb.

Data flows through the subpackages in this order: ``config`` (pydantic configs, no torch) ->
``model`` (tokenizer, the embedded default, SFT warm start) -> ``rollout`` (policy engines, the batched
play loop, Ray workers) -> ``trainer`` (TRL GRPO, callbacks, checkpoints) -> ``eval`` (held-out reports);
``tracking`` is the driver's JSONL + W&B sink, ``sweep`` runs trials of ``replicalab train`` on Ray Tune,
``bench`` holds the ``replicalab bench`` benchmarks.
"""
