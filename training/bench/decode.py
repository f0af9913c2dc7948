"""Decode throughput of ``PolicyModel`` against the memory-bandwidth limit of its device (``bench generate``).

A decoding step reads every weight once and each row's KV cache so far, and does little arithmetic per byte at
small batches: its floor is ``bytes_per_step / bandwidth``.  ``copy_bandwidth`` measures the bandwidth the device
actually reaches (a large tensor copy reads and writes every byte); ``decode_rates`` times ``generate_ids`` on a
batch of prompts and turns the decoding steps it made into bytes per second, so the share of the limit a
configuration uses is ``achieved / measured``.  Small models fit in a CPU's caches, where the share can exceed 1.
"""

from __future__ import annotations

import time
from typing import Any

#: Bytes of the buffer ``copy_bandwidth`` copies (large enough to leave every cache).
COPY_BYTES = 512 * 2**20
COPY_REPEATS = 5


def _sync(device: Any) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def copy_bandwidth(device: Any, nbytes: int = COPY_BYTES, repeats: int = COPY_REPEATS) -> float:
    """Bytes per second a ``nbytes`` device-to-device copy moves (read plus write), best of ``repeats``."""
    import torch

    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = float("inf")
    for _ in range(repeats):
        _sync(device)
        tick = time.perf_counter()
        dst.copy_(src)
        _sync(device)
        best = min(best, time.perf_counter() - tick)
    return 2 * nbytes / best


def weight_bytes(model: Any) -> int:
    """Bytes of the model's parameters and buffers (each read once per decoding step)."""
    tensors = list(model.parameters()) + list(model.buffers())
    seen, total = set(), 0
    for t in tensors:
        if t.data_ptr() not in seen:
            seen.add(t.data_ptr())
            total += t.numel() * t.element_size()
    return total


def kv_bytes_per_token(model: Any) -> int:
    """Bytes of KV cache one token of one sequence holds (keys and values of every layer)."""
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    heads = getattr(cfg, "num_attention_heads")
    kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    element = next(model.parameters()).element_size()
    return 2 * cfg.num_hidden_layers * kv_heads * head_dim * element


def decode_rates(policy: Any, prompts: list[list[int]], sampling: Any, row_seeds: bool = True) -> dict[str, float]:
    """Time one ``generate_ids`` call on ``prompts`` (after a warm-up call of the same shape: compilation and
    allocation are not timed): tokens/s, decoding steps/s and the bytes per second those steps read.
    ``row_seeds``: each row samples from a generator of its own, as rollouts do (else one shared generator)."""
    seeds = list(range(len(prompts))) if row_seeds else None
    policy.generate_ids(prompts, sampling, row_seeds=seeds)
    _sync(policy.device)
    tick = time.perf_counter()
    out = policy.generate_ids(prompts, sampling, row_seeds=seeds)
    _sync(policy.device)
    seconds = time.perf_counter() - tick
    steps = max(len(g.completion_ids) for g in out)
    tokens = sum(len(g.completion_ids) for g in out)
    prompt = max(len(p) for p in prompts)
    kv_read = kv_bytes_per_token(policy.model) * len(prompts) * (prompt + steps / 2)  # the mean context
    per_step = weight_bytes(policy.model) + kv_read
    return {"seconds": seconds, "tokens": tokens, "steps": steps, "tokens_per_s": tokens / seconds,
            "steps_per_s": steps / seconds, "bytes_per_step": per_step, "read_bytes_per_s": per_step * steps / seconds}


#: ``profile_decode``: the operators printed, by their own time on the device (on CPU: on the host).
PROFILE_ROWS = 20


def profile_decode(policy: Any, prompts: list[list[int]], sampling: Any) -> str:
    """One ``generate_ids`` call on ``prompts`` (after a warm-up of the same shape) under ``torch.profiler``: the
    table of the operators that took the most time, and the wall time of the whole call beside their sum."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    seeds = list(range(len(prompts)))
    policy.generate_ids(prompts, sampling, row_seeds=seeds)
    _sync(policy.device)
    cuda = torch.device(policy.device).type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        tick = time.perf_counter()
        policy.generate_ids(prompts, sampling, row_seeds=seeds)
        _sync(policy.device)
        wall = time.perf_counter() - tick
    sort = "self_cuda_time_total" if cuda else "self_cpu_time_total"
    table = prof.key_averages().table(sort_by=sort, row_limit=PROFILE_ROWS)
    return f"one call profiled: {wall:.3f} s wall (profiler on)\n{table}"
