"""ReplicaLab's training pipeline: everything that needs torch, transformers, trl, ray or wandb.

Layers, ground floor first (the game, ``replicalab``, is below them all): ``config`` (pydantic configs, no
torch) and ``errors``; ``model`` (tokenizer, the embedded default, SFT warm start), ``cluster`` (placement
plans, placement groups, Ray sessions) and ``tracking`` (the driver's JSONL + W&B sink); ``rollout`` (the
contract, policy engines, the batched play loop, backends and Ray workers); ``trainer`` (``build`` turns a
config into a run's objects; TRL GRPO, callbacks, checkpoints); ``eval`` (held-out reports) and ``sweep``
(trials of ``replicalab train`` on Ray Tune); ``bench`` and ``cli`` (the ``replicalab`` command).
"""
