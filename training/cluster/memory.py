"""GPU memory estimates for the placement plan: a model's shape from its ``config.json``, and what the
learner and a rollout worker hold on a GPU.  No torch: plans are made before anything loads.

The estimates are upper bounds of the configured run, not measurements: sequences are taken at the
longest the config allows (``grpo.max_completion_length``), every named constant below says where its
number comes from, and ``MemoryEstimate`` keeps the parts apart so the plan can show them.

- Learner, full fine-tuning: weights and gradients at the learner's dtype (``dtype``: float32, so they are the
  master copy; 16-bit full fine-tuning is refused by the config) + Adam's two fp32 moments per parameter, divided
  by the learner processes when they shard (FSDP FULL_SHARD / ZeRO-3), + a reference copy when ``grpo.beta > 0``,
  + activations and logits of one micro-batch (``ModelShape.layer_activation_bytes``: the layer's real widths,
  norms in float32), + the caching allocator's slack on them (``ALLOCATOR_SLACK``), + CUDA overhead.
- Learner, LoRA: the frozen base weights at the learner's dtype (bfloat16 on cuda by default) + fp32 adapters with
  their gradients and Adam moments (the reference is the base with adapters off: no copy), + activations,
  + overhead.
- Rollout worker: one weights copy per model it holds (the policy and each ``model:DIR`` opponent,
  counted at the policy's size), + the KV cache of every episode it generates for at once, + overhead.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Mapping, Optional

GIB = float(2**30)
#: Adam keeps two fp32 moments (exp_avg, exp_avg_sq) per trainable parameter.
ADAM_STATE_BYTES = 8
#: PEFT keeps adapter weights in fp32 (``autocast_adapter_dtype``): weight + gradient + Adam = 4 + 4 + 8.
LORA_BYTES_PER_TRAINABLE = 16
#: Trainable LoRA parameters as a fraction of the base: rank-16 adapters on every linear layer of
#: Qwen2.5-7B hold 40M parameters (0.5%); twice that is the allowance.
LORA_TRAINABLE_FRACTION = 0.01
#: Per process on a GPU: CUDA context, cuBLAS workspace, allocator fragmentation, NCCL buffers.
CUDA_OVERHEAD_GIB = 1.5
#: Tokens of a seat's first observation (system prompt + brief or lab): at most 3270 characters over
#: every template and difficulty (measured), ~820 tokens at 4 characters per token; rounded up.
EPISODE_PROMPT_TOKENS = 1024
#: Bytes per element of what mixed precision keeps in float32: the residual stream and the RMSNorms (transformers
#: computes them in float32), whatever the compute dtype.
NORM_BYTES = 4
#: The caching allocator holds more than the tensors it serves (blocks split and cached as a step's shapes change):
#: reserved memory beyond the allocated, as a fraction of the step's changing parts (activations, KV cache).  On
#: one H100, an in-process step of gpu-embedded.yaml on the embedded default reserved 14.25 GiB for 10.39 GiB
#: allocated (0.4 of its changing parts) without expandable segments; the learner now turns them on
#: (``training.trainer.run``), which keeps the excess small.
ALLOCATOR_SLACK = 0.25
#: The completion logits and their gradient, both in the model dtype (TRL's fused log-softmax keeps no
#: fp32 copy on GPU).
LOGIT_COPIES = 2
#: Without a config.json to read the shape from: KV cache of a rollout worker and activations of the
#: learner as fractions of one weights copy (rough; give the model directory for a real estimate).
FALLBACK_KV_FRACTION = 0.25
FALLBACK_ACTIVATION_FRACTION = 0.5
#: Weights reach the workers through Ray's object store as float32 numpy arrays.
SHIPPED_BYTES_PER_PARAM = 4
#: config.json dtype names -> bytes per parameter.
DTYPE_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2}


@dataclass(frozen=True)
class ModelShape:
    """The sizes of a decoder-only transformer (Llama / Qwen2 / Mistral family config keys)."""

    params: int
    hidden: int
    layers: int
    vocab: int
    kv_heads: int
    head_dim: int
    dtype_bytes: Optional[int] = None  # from config.json's dtype, when it names one
    heads: int = 0  # attention heads (0: as many as the KV heads)
    intermediate: int = 0  # the MLP's inner width (0: 4 x hidden)

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "ModelShape":
        """Shape and parameter count of a ``config.json`` mapping (KeyError when a size is missing)."""
        hidden, layers, vocab = config["hidden_size"], config["num_hidden_layers"], config["vocab_size"]
        heads = config["num_attention_heads"]
        kv_heads = config.get("num_key_value_heads") or heads
        head_dim = config.get("head_dim") or hidden // heads
        inter = config["intermediate_size"]
        bias = config.get("attention_bias", config.get("model_type") == "qwen2")
        attn = hidden * head_dim * (heads + 2 * kv_heads) + heads * head_dim * hidden
        attn += head_dim * (heads + 2 * kv_heads) if bias else 0
        per_layer = attn + 3 * hidden * inter + 2 * hidden
        embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings", False) else 2)
        dtype = str(config.get("dtype") or config.get("torch_dtype") or "").replace("torch.", "")
        return cls(params=layers * per_layer + embeddings + hidden, hidden=hidden, layers=layers, vocab=vocab,
                   kv_heads=kv_heads, head_dim=head_dim, dtype_bytes=DTYPE_BYTES.get(dtype), heads=heads,
                   intermediate=inter)

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """KV-cache bytes one token takes: keys and values of every layer."""
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes

    def layer_activation_bytes(self, dtype_bytes: int) -> int:
        """Bytes one token of one decoder layer keeps for the backward pass (Llama / Qwen2 / Mistral: two RMSNorms,
        attention through SDPA, which stores no score matrix, and a gated MLP), computing at ``dtype_bytes``:
        - each RMSNorm: its float32 input and output (``NORM_BYTES``);
        - attention: the q, k and v projections' inputs (each linear casts its own), their outputs and the rotary
          embedding's, the attention output and the output projection's input;
        - MLP: the gate and up projections' inputs, both outputs, the activation and the product."""
        h, i = self.hidden, self.intermediate or 4 * self.hidden
        q, kv = (self.heads or self.kv_heads) * self.head_dim, self.kv_heads * self.head_dim
        norms = 2 * 2 * h * NORM_BYTES
        attention = (3 * h + 2 * (q + 2 * kv) + 2 * q) * dtype_bytes
        mlp = (2 * h + 4 * i) * dtype_bytes
        return norms + attention + mlp


def read_model_shape(model_dir: str | Path) -> Optional[ModelShape]:
    """``ModelShape`` of the ``config.json`` in ``model_dir``; None when there is none or it lacks a size."""
    path = Path(model_dir).expanduser() / "config.json"
    if not path.is_file():
        return None
    config = json.loads(path.read_text(encoding="utf-8"))
    config = config.get("text_config", config)  # multimodal wrappers keep the LM's sizes there
    try:
        return ModelShape.from_config(config)
    except (KeyError, TypeError, ZeroDivisionError):
        return None


@dataclass(frozen=True)
class MemoryEstimate:
    """Estimated GiB one process holds on one GPU, by part (0 where a part does not apply)."""

    weights: float = 0.0
    gradients: float = 0.0
    optimizer: float = 0.0
    reference: float = 0.0
    activations: float = 0.0
    kv_cache: float = 0.0
    overhead: float = 0.0

    @property
    def total(self) -> float:
        return sum(getattr(self, f.name) for f in fields(self))

    def parts(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def largest(self) -> str:
        """Name of the biggest part."""
        return max(self.parts().items(), key=lambda kv: kv[1])[0]

    def scaled(self, factor: float) -> "MemoryEstimate":
        """Every part times ``factor`` (a worker spread over several GPUs holds 1/g of it on each)."""
        return MemoryEstimate(**{k: v * factor for k, v in self.parts().items()})


def learner_memory(*, params: int, weights_gib: float, dtype_bytes: int, lora: bool, processes: int,
                   sharded: bool, reference: bool, micro_batch: int, completion_tokens: int,
                   gradient_checkpointing: bool, shape: Optional[ModelShape],
                   rollout_kv_gib: float = 0.0, learner_dtype_bytes: Optional[int] = None) -> MemoryEstimate:
    """What one learner process holds on its GPU.

    ``micro_batch`` sequences of ``EPISODE_PROMPT_TOKENS + completion_tokens`` tokens go through one
    forward/backward (activations at ``dtype_bytes``, the compute dtype); ``rollout_kv_gib`` adds the KV cache when
    episodes are played in this process.  ``learner_dtype_bytes`` is the learner's weights (and full fine-tuning's
    gradients) per parameter (None: ``dtype_bytes``; ``weights_gib`` is then one copy at that dtype).
    """
    copy_gib = weights_gib  # one copy at the compute dtype (the fallback fraction is of it)
    if learner_dtype_bytes is not None:
        weights_gib = params * learner_dtype_bytes / GIB
    share = 1.0 / processes if sharded else 1.0
    if lora:  # fp32 adapters: weight and gradient 4 bytes each, Adam the rest of LORA_BYTES_PER_TRAINABLE
        trainable = params * LORA_TRAINABLE_FRACTION * share
        weights = weights_gib * share + trainable * 4 / GIB
        grads = trainable * 4 / GIB
        optimizer = trainable * (LORA_BYTES_PER_TRAINABLE - 8) / GIB
        ref = 0.0
    else:
        weights = weights_gib * share
        grads = weights_gib * share  # at the weights' dtype
        optimizer = params * ADAM_STATE_BYTES / GIB * share
        ref = weights if reference else 0.0
    tokens = micro_batch * (EPISODE_PROMPT_TOKENS + completion_tokens)
    if shape is None:
        activations = copy_gib * FALLBACK_ACTIVATION_FRACTION
    else:
        stored_layers = 1 if gradient_checkpointing else shape.layers
        layer_bytes = tokens * shape.layer_activation_bytes(dtype_bytes) * stored_layers
        checkpoints = tokens * shape.hidden * NORM_BYTES * shape.layers if gradient_checkpointing else 0
        logits = micro_batch * completion_tokens * shape.vocab * dtype_bytes * LOGIT_COPIES
        activations = (layer_bytes + checkpoints + logits) / GIB
    return MemoryEstimate(weights=weights, gradients=grads, optimizer=optimizer, reference=ref,
                          activations=activations * (1 + ALLOCATOR_SLACK),
                          kv_cache=rollout_kv_gib * (1 + ALLOCATOR_SLACK), overhead=CUDA_OVERHEAD_GIB)


def rollout_kv_gib(*, episodes: int, context_tokens: int, dtype_bytes: int, shape: Optional[ModelShape],
                   weights_gib: float) -> float:
    """KV cache of ``episodes`` sequences of ``context_tokens`` generated for at once (one per episode:
    the seat that acts)."""
    if shape is None:
        return weights_gib * FALLBACK_KV_FRACTION
    return episodes * context_tokens * shape.kv_bytes_per_token(dtype_bytes) / GIB


def worker_memory(*, weights_gib: float, copies: int, kv_gib: float, gpus: float) -> MemoryEstimate:
    """What one rollout worker holds on each of its GPUs (``gpus`` > 1 splits it evenly; a fraction
    still holds all of it: co-located workers each keep their own copy)."""
    full = MemoryEstimate(weights=weights_gib * copies, kv_cache=kv_gib, overhead=CUDA_OVERHEAD_GIB)
    return full.scaled(1.0 / gpus) if gpus > 1 else full


def context_tokens(max_completion_length: int, max_rounds: int, max_new_tokens: int) -> int:
    """Longest context a seat generates from: its first observation, its own completions (at most
    ``min(max_completion_length, rounds x max_new_tokens)``) and as many tokens of the other role's."""
    own = min(max_completion_length, max_rounds * max_new_tokens)
    return EPISODE_PROMPT_TOKENS + 2 * own


def ceil_div(a: int, b: int) -> int:
    return -(-a // b) if b else 0


def gib(x: float) -> str:
    """GiB with one decimal ("-" for 0)."""
    return "-" if x == 0 else f"{x:.1f}" if x >= 0.05 else "<0.1"
