"""The keywords of transformers' ``TrainingArguments`` that both of the project's TRL configs take the same way:
the SFT warm start's ``SFTConfig`` (``training.model.sft``) and GRPO's ``GRPOConfig``
(``training.trainer.grpo.grpo_config``).  Each adds its own (checkpoints, sequence lengths, GRPO's loss...).

Torch-free: a dict of plain values, so it imports anywhere.
"""

from __future__ import annotations

from typing import Any, Optional, Protocol


class OptimizerParams(Protocol):
    """The optimiser hyperparameters both ``SFTHyperParams`` and ``GRPOParams`` hold, under these names."""

    learning_rate: float
    lr_scheduler_type: str
    warmup_ratio: float
    weight_decay: float
    gradient_accumulation_steps: int


def common_trainer_args(hp: OptimizerParams, *, output_dir: str, max_steps: int, batch_per_process: int,
                        seed: int, use_cpu: bool, bf16: bool, gradient_checkpointing: bool, logging_steps: int,
                        progress: bool, learning_rate: Optional[float] = None) -> dict[str, Any]:
    """``hp``'s optimiser hyperparameters (``learning_rate`` overrides ``hp.learning_rate``), ``max_steps``
    optimizer steps of ``gradient_accumulation_steps`` micro-batches of ``batch_per_process`` sequences per
    process, the seed, the precision flags, scalars every ``logging_steps`` steps to no reporting integration
    (the run logger forwards them), a progress bar when ``progress``."""
    return {
        "output_dir": output_dir,
        "max_steps": max_steps,
        "per_device_train_batch_size": batch_per_process,
        "gradient_accumulation_steps": hp.gradient_accumulation_steps,
        "gradient_checkpointing": gradient_checkpointing,
        "learning_rate": learning_rate or hp.learning_rate,
        "lr_scheduler_type": hp.lr_scheduler_type,
        "warmup_steps": hp.warmup_ratio,  # a float below 1 is a ratio of max_steps (transformers 5: no warmup_ratio)
        "weight_decay": hp.weight_decay,
        "seed": seed,
        "use_cpu": use_cpu,
        "bf16": bf16,
        "logging_steps": logging_steps,
        "report_to": "none",
        "disable_tqdm": not progress,
    }
