"""Exact sampling for ``PolicyModel``: only the configured sampling parameters, log-probs step by step.

A checkpoint's ``generation_config.json`` may carry sampling extras (Qwen2.5-Instruct: a repetition
penalty).  ``generate`` fills every parameter a call leaves unset from the model's generation config, so
such extras would silently change the distribution sampled from.  ``PolicyModel`` therefore lists them once
(``neutralised_extras``), replaces the model's generation config by a bare one (``bare_generation_config``)
and passes a complete explicit config each call (``explicit_generation_config``).

``generate`` puts caller-given processors BEFORE its own temperature/top-k/top-p warpers, so the
configured warpers are built here (``sampling_processors``) and the explicit config leaves generate's
own off (temperature 1, top_k 0, top_p 1): the chain is exactly the configured warpers, then
``StepLogprobs``.  ``StepLogprobs`` is the last logits processor of the chain: at each step it keeps the log-softmax of the
processed scores (temperature, top-k, top-p applied: the distribution ``generate`` samples from) and, one
step later, gathers the token that was drawn.  Only one ``batch x vocab`` buffer lives at a time, unlike
``output_logits=True``, which keeps a float32 copy of every step's full-vocabulary logits.

Relation to TRL's scoring: TRL scores ``log_softmax(logits / T)`` without top-k/top-p.  With ``top_k=0`` and
``top_p=1.0`` (the defaults) both are the same number; with filtering on, the recorded log-prob is that of
the renormalised, truncated distribution and is higher than TRL's by ``-log(kept probability mass)``; the
``mismatch/<role>/*`` metrics of a training run show that gap.
"""

from __future__ import annotations

import logging
import random
from typing import Any, Optional, Sequence

import torch
from transformers import (
    GenerationConfig,
    LogitsProcessor,
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from training.config.model import SamplingConfig

logger = logging.getLogger(__name__)

#: Generation-config entries that change the sampled distribution, with the value that leaves it alone.
NEUTRAL_SAMPLING: dict[str, Any] = {
    "repetition_penalty": 1.0,
    "encoder_repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "encoder_no_repeat_ngram_size": 0,
    "min_p": None,
    "top_h": None,
    "typical_p": 1.0,
    "epsilon_cutoff": 0.0,
    "eta_cutoff": 0.0,
    "bad_words_ids": None,
    "suppress_tokens": None,
    "begin_suppress_tokens": None,
    "sequence_bias": None,
    "forced_bos_token_id": None,
    "forced_eos_token_id": None,
    "exponential_decay_length_penalty": None,
    "min_length": 0,
    "min_new_tokens": None,
    "renormalize_logits": False,
    "guidance_scale": None,
    "watermarking_config": None,
    "num_beams": 1,
    "diversity_penalty": None,
    "low_memory": None,
}
#: Entries the SamplingConfig sets itself; a checkpoint's values for them are replaced, never used.
CONFIGURED = ("temperature", "top_p", "top_k", "do_sample", "max_new_tokens", "max_length")


def neutralised_extras(checkpoint: Optional[GenerationConfig]) -> dict[str, Any]:
    """The checkpoint's sampling extras that differ from neutral (what exact sampling switches off)."""
    if checkpoint is None:
        return {}
    found = {}
    for key, neutral in NEUTRAL_SAMPLING.items():
        value = getattr(checkpoint, key, None)
        if value is not None and value != neutral:
            found[key] = value
    return found


def replaced_settings(checkpoint: Optional[GenerationConfig]) -> dict[str, Any]:
    """The checkpoint's own temperature / top-p / top-k / do_sample: the SamplingConfig's replace them."""
    if checkpoint is None:
        return {}
    keys = ("do_sample", "temperature", "top_p", "top_k")
    return {k: getattr(checkpoint, k) for k in keys if getattr(checkpoint, k, None) is not None}


def bare_generation_config(eos: Sequence[int], pad: int, bos: Optional[int]) -> GenerationConfig:
    """A generation config with token ids only: nothing for ``generate`` to inherit."""
    return GenerationConfig(eos_token_id=list(eos), pad_token_id=pad, bos_token_id=bos)


def explicit_generation_config(sampling: SamplingConfig, *, max_new_tokens: int, eos: Sequence[int],
                               pad: int) -> GenerationConfig:
    """Every distribution-changing parameter set: the configured ones, the rest neutral."""
    neutral = {k: v for k, v in NEUTRAL_SAMPLING.items() if v is not None}
    # generate's own warpers off (the global default top_k=50 included): sampling_processors applies them.
    chosen: dict[str, Any] = dict(do_sample=sampling.do_sample, max_new_tokens=max_new_tokens,
                                  temperature=1.0, top_p=1.0, top_k=0)
    if sampling.kv_cache == "static":  # preallocated; generate compiles the decoding step on a GPU
        chosen["cache_implementation"] = "static"
    return GenerationConfig(**neutral, **chosen, eos_token_id=list(eos), pad_token_id=pad,
                            return_dict_in_generate=True)


def sampling_processors(sampling: SamplingConfig, recorder: "StepLogprobs",
                        row_seeds: Optional[Sequence[int]] = None,
                        grammar: Optional[LogitsProcessor] = None) -> LogitsProcessorList:
    """``grammar`` (constrained decoding: ``training.rollout.grammar.GrammarMask``), then the configured warpers
    (temperature, top-k, top-p, in generate's order), then ``recorder``, then (with ``row_seeds``, when sampling) a
    ``RowSampler``."""
    chain = LogitsProcessorList([grammar] if grammar is not None else [])
    if sampling.do_sample:
        if sampling.temperature != 1.0:
            chain.append(TemperatureLogitsWarper(sampling.temperature))
        if sampling.top_k:
            chain.append(TopKLogitsWarper(top_k=sampling.top_k))
        if sampling.top_p < 1.0:
            chain.append(TopPLogitsWarper(top_p=sampling.top_p))
    chain.append(recorder)
    if sampling.do_sample and row_seeds is not None:
        chain.append(RowSampler(row_seeds))
    return chain


class StepLogprobs(LogitsProcessor):
    """Last processor of the chain: the log-prob, under the distribution sampled from, of each drawn token.

    ``__call__`` sees the scores every processor before it produced; the token drawn from them appears as
    the last column of ``input_ids`` on the next call (and in the returned sequences after the last step,
    see ``finish``).  Greedy decoding records ``log_softmax(raw logits)`` (temperature 1).
    """

    def __init__(self) -> None:
        self._pending: Optional[torch.Tensor] = None
        self._steps: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self._pending is not None:
            self._steps.append(self._pending.gather(1, input_ids[:, -1:]).squeeze(1))
        self._pending = torch.log_softmax(scores.float(), dim=-1)
        return scores

    def finish(self, new_tokens: torch.Tensor) -> torch.Tensor:
        """``[batch, steps]`` log-probs of ``new_tokens`` (the generated columns of the sequences)."""
        if self._pending is not None:
            last = new_tokens[:, len(self._steps): len(self._steps) + 1].to(self._pending.device)
            self._steps.append(self._pending.gather(1, last).squeeze(1))
            self._pending = None
        if not self._steps:
            return torch.zeros((new_tokens.shape[0], 0))
        return torch.stack(self._steps[: new_tokens.shape[1]], dim=1)


class RowSampler(LogitsProcessor):
    """After ``StepLogprobs``: draw each row's next token from its processed distribution with a random stream of
    its own and leave only that token finite, so ``generate``'s greedy step takes it.

    A row's ``t``-th token is the inverse CDF of its distribution (float64 cumulative sums) at the ``t``-th number
    of ``random.Random(row_seed)``: one number per row and step on the host, one batched search on the device, so a
    step costs the same few kernels whatever the batch (a ``torch.multinomial`` per row costs a launch and a
    device sync each).  A row's tokens then depend on its seed and its own distribution only, not on the batch it
    shares or the row it sits in (its numbers are drawn on the host, whatever the device): an episode samples the
    same whether it runs in this process or on any Ray worker, and each turn draws from a stream of its own.
    Tokens of probability zero (masked, filtered) are never drawn: the search takes the first token whose cumulative
    sum exceeds the number."""

    def __init__(self, row_seeds: Sequence[int]) -> None:
        self.streams = [random.Random(seed) for seed in row_seeds]

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        uniforms = torch.tensor([stream.random() for stream in self.streams], dtype=torch.float64)
        cdf = torch.softmax(scores.double(), dim=-1).cumsum_(dim=-1)
        targets = uniforms.to(scores.device, non_blocking=True).unsqueeze(1) * cdf[:, -1:]
        picks = torch.searchsorted(cdf, targets, side="right").clamp_(max=scores.shape[-1] - 1)
        chosen = torch.full_like(scores, float("-inf"))
        return chosen.scatter_(1, picks, 0.0)


def end_of_turn_id(tokenizer: Any) -> Optional[int]:
    """The token that closes an assistant turn in the chat template (``<|im_end|>``, ``<|eot_id|>``,
    ``<end_of_turn>``...): the added token that follows the content of a rendered one-message assistant
    chat.  None when the template closes turns with ordinary text (or cannot render the probe)."""
    marker = "ReplicaLabTurnProbe"
    try:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": "hello"}, {"role": "assistant", "content": marker}], tokenize=False)
    except Exception:  # a template that cannot render this chat is caught by validation
        return None
    at = text.rfind(marker)
    if at < 0:
        return None
    tail = text[at + len(marker):].lstrip(" \t\n")
    added = sorted(tokenizer.get_added_vocab().items(), key=lambda kv: -len(kv[0]))
    for content, token_id in added:
        if content and tail.startswith(content):
            return int(token_id)
    return None
