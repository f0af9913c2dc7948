"""Supervised warm-start with TRL's ``SFTTrainer`` on conversational prompt/completion examples.

The loss covers the completion tokens only (TRL's completion-only loss for prompt/completion data).
``max_length`` must cover prompt + completion, or the completion is cut away and nothing is learned;
``sequence_lengths`` measures them with the same chat template TRL uses.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from typing import Any, Sequence

import torch
from datasets import Dataset
from datasets import disable_progress_bars
from transformers import PreTrainedModel, PreTrainedTokenizerBase
from trl import SFTConfig, SFTTrainer

from training.model_config import SFTHyperParams


@dataclass(frozen=True)
class SFTResult:
    """What a warm-start run did."""

    steps: int
    seconds: float
    mean_loss: float
    max_length: int
    examples: int
    completion_only: bool


def sequence_lengths(tokenizer: PreTrainedTokenizerBase, examples: Sequence[dict[str, Any]]) -> list[int]:
    """Token length of prompt + completion of every example under the tokenizer's chat template."""
    return [
        len(tokenizer.apply_chat_template(ex["prompt"] + ex["completion"], tokenize=True, return_dict=False))
        for ex in examples
    ]


def run_sft(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    examples: Sequence[dict[str, Any]],
    hp: SFTHyperParams,
    *,
    max_length: int,
    max_steps: int,
    completion_only: bool = True,
    progress: bool = True,
) -> SFTResult:
    """Fine-tune ``model`` in place on ``examples`` for ``max_steps`` optimizer steps.

    ``completion_only=False`` puts the loss on every token of prompt + completion (a language-model
    pass over the transcripts); ``True`` is TRL's completion-only loss.  CPU unless CUDA is present.
    """
    if not progress:
        disable_progress_bars()
    dataset = Dataset.from_list(list(examples))
    with tempfile.TemporaryDirectory(prefix="replicalab-sft-") as scratch:
        args = SFTConfig(
            output_dir=scratch,
            max_length=max_length,
            completion_only_loss=completion_only,
            learning_rate=hp.learning_rate,
            max_steps=max_steps,
            per_device_train_batch_size=hp.per_device_train_batch_size,
            gradient_accumulation_steps=hp.gradient_accumulation_steps,
            warmup_steps=hp.warmup_ratio,
            weight_decay=hp.weight_decay,
            lr_scheduler_type=hp.lr_scheduler_type,
            seed=hp.seed,
            logging_steps=hp.logging_steps,
            train_sampling_strategy="group_by_length",
            use_cpu=not torch.cuda.is_available(),
            bf16=False,
            report_to="none",
            save_strategy="no",
            disable_tqdm=not progress,
            dataloader_num_workers=0,
        )
        trainer = SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer)
        started = time.perf_counter()
        output = trainer.train()
        seconds = time.perf_counter() - started
    model.eval()
    return SFTResult(
        steps=int(output.global_step),
        seconds=seconds,
        mean_loss=float(output.training_loss),
        max_length=max_length,
        examples=len(dataset),
        completion_only=completion_only,
    )
