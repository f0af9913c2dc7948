"""Supervised warm-start with TRL's ``SFTTrainer`` on chat examples, tokenized here.

Examples are prompt/completion conversations (``{"prompt": [...], "completion": [assistant]}``) or
whole multi-turn chats (``{"messages": [...]}``).  ``tokenize_example`` renders them with the
tokenizer's chat template -- the same ids ``PolicyModel.encode_chat`` and the rollout's append-only
chats produce -- and marks the tokens of every assistant message (its text and its end-of-turn
token) in ``completion_mask``; TRL's completion-only loss then trains exactly those tokens.
``max_length`` must cover the longest example, or completions are cut away and nothing is learned.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import torch
from datasets import Dataset, disable_progress_bars
from transformers import PreTrainedModel, PreTrainedTokenizerBase
from trl import SFTConfig, SFTTrainer

from training.config.model import SFTHyperParams
from training.model.trainer_args import common_trainer_args

Messages = list[dict[str, str]]
TokenizedExample = dict[str, list[int]]


@dataclass(frozen=True)
class SFTResult:
    """What a warm-start run did."""

    steps: int
    seconds: float
    mean_loss: float
    max_length: int
    examples: int
    completion_only: bool


def _render(tokenizer: PreTrainedTokenizerBase, messages: Messages, generation_prompt: bool) -> list[int]:
    return list(tokenizer.apply_chat_template(messages, tokenize=True, return_dict=False,
                                              add_generation_prompt=generation_prompt))


def example_messages(example: dict[str, Any]) -> Messages:
    """The full conversation of a prompt/completion or messages example."""
    if "messages" in example:
        return list(example["messages"])
    return [*example["prompt"], *example["completion"]]


def tokenize_example(tokenizer: PreTrainedTokenizerBase, example: dict[str, Any]) -> TokenizedExample:
    """``{"input_ids", "completion_mask"}``: the chat-templated conversation, 1 on assistant tokens.

    For a prompt/completion example only the completion's assistant turns are marked (the prompt may
    hold earlier replies of the same chat, which are context here).  Raises if the template does not
    render the conversation append-only (each prefix's ids a prefix of the whole).
    """
    messages = example_messages(example)
    first = len(example["prompt"]) if "prompt" in example else 0
    ids = _render(tokenizer, messages, False)
    mask = [0] * len(ids)
    for j in range(first, len(messages)):
        if messages[j]["role"] != "assistant":
            continue
        opened = _render(tokenizer, messages[:j], True)
        closed = _render(tokenizer, messages[: j + 1], False)
        if ids[: len(opened)] != opened or ids[: len(closed)] != closed:
            raise ValueError("the chat template does not render the conversation append-only")
        mask[len(opened): len(closed)] = [1] * (len(closed) - len(opened))
    if not any(mask):
        raise ValueError("example has no assistant message to train on")
    return {"input_ids": ids, "completion_mask": mask}


def prefix_loss_row(tokenizer: PreTrainedTokenizerBase, example: dict[str, Any],
                    prefix_end: Callable[[str], Optional[int]]) -> TokenizedExample:
    """``tokenize_example``'s row with the loss on a prefix of each assistant reply only: the tokens that lie
    within the reply's first ``prefix_end(reply)`` characters (a reply for which it is None keeps no loss).

    The characters are mapped to tokens by the fast tokenizer's offsets over the chat-templated text, whose
    ids must be the template's own."""
    row = tokenize_example(tokenizer, example)
    messages = example_messages(example)
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    if list(encoded["input_ids"]) != row["input_ids"]:
        raise ValueError("the chat-templated text does not tokenize to the template's ids; no offsets to map")
    offsets = encoded["offset_mapping"]
    mask = [0] * len(row["input_ids"])
    first = len(example["prompt"]) if "prompt" in example else 0
    for j in range(first, len(messages)):
        end = prefix_end(messages[j]["content"]) if messages[j]["role"] == "assistant" else None
        if end is None:
            continue
        start = len(tokenizer.apply_chat_template(messages[:j], tokenize=False, add_generation_prompt=True))
        for k, (a, b) in enumerate(offsets):
            if row["completion_mask"][k] and a >= start and b <= start + end:
                mask[k] = 1
    return {"input_ids": row["input_ids"], "completion_mask": mask}


def sequence_lengths(tokenizer: PreTrainedTokenizerBase, examples: Sequence[dict[str, Any]]) -> list[int]:
    """Token length of every example under the tokenizer's chat template (tokenized ones as they are)."""
    return [len(ex["input_ids"]) if "input_ids" in ex else len(_render(tokenizer, example_messages(ex), False))
            for ex in examples]


def run_sft(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    examples: Sequence[dict[str, Any]],
    hp: SFTHyperParams,
    *,
    max_length: int,
    max_steps: int,
    completion_only: bool = True,
    learning_rate: float | None = None,
    progress: bool = True,
) -> SFTResult:
    """Fine-tune ``model`` in place on ``examples`` for ``max_steps`` optimizer steps.

    ``examples`` are chat examples (tokenized here with ``tokenize_example``) or already tokenized
    rows.  ``completion_only=False`` puts the loss on every token (a language-model pass over the
    transcripts); ``True`` trains the assistant tokens only.  ``learning_rate`` overrides
    ``hp.learning_rate``.  CPU unless CUDA is present.
    """
    if not progress:
        disable_progress_bars()
    rows = [ex if "input_ids" in ex else tokenize_example(tokenizer, ex) for ex in examples]
    dataset = Dataset.from_list(rows)
    with tempfile.TemporaryDirectory(prefix="replicalab-sft-") as scratch:
        args = SFTConfig(
            **common_trainer_args(hp, output_dir=scratch, max_steps=max_steps,
                                  batch_per_process=hp.per_device_train_batch_size, seed=hp.seed,
                                  use_cpu=not torch.cuda.is_available(), bf16=False,
                                  # TRL turns checkpointing on by default; on a model this small it only costs time.
                                  gradient_checkpointing=False, logging_steps=hp.logging_steps,
                                  progress=progress, learning_rate=learning_rate),
            max_length=max_length,
            completion_only_loss=completion_only,
            train_sampling_strategy="group_by_length",
            save_strategy="no",
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
