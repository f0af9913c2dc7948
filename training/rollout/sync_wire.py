"""The wire format of a weight sync: the policy's tensors, in their own dtype, as one byte stream cut into
fixed-size buckets.

``plan_layout(state, bucket_bytes)`` lays every distinct tensor of a payload end to end (each start aligned to
``ALIGN_BYTES``) and cuts the stream every ``bucket_bytes``; a tensor may span buckets.  Tensors that share
storage (tied embeddings) are laid out once, the others named in ``WeightLayout.aliases``; entries that are
not arrays (a LoRA payload's config) ride in ``WeightLayout.extras``.  The layout is small and picklable: the
driver hands it to every receiver with the call that starts the receive.

``fill_bucket`` packs bucket ``i`` on the source; a receiver's ``Unpacker`` turns the buckets, in order, back
into ``(name, tensor)`` pairs with the source's dtype and shape, bit for bit.  A tensor inside one bucket
comes back as a view into the bucket (valid until the bucket buffer is reused); one that spans buckets is
assembled in a staging tensor of its own.

``numpy_payload`` is the object-store form of a payload: float32 numpy arrays (what the object store path
ships, and what opponent snapshots keep).
"""

from __future__ import annotations

import warnings
from bisect import bisect_right
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Optional

import numpy as np
import torch

#: Every tensor starts at a multiple of this many bytes in the stream (so a view of any dtype is aligned).
ALIGN_BYTES = 16


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of the stream: its name, dtype (``torch`` attribute name), shape and first byte."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    start: int
    nbytes: int

    @property
    def end(self) -> int:
        return self.start + self.nbytes


@dataclass(frozen=True)
class WeightLayout:
    """Where every tensor of a payload lies in the byte stream, and how the stream is cut into buckets."""

    entries: tuple[TensorEntry, ...]
    bucket_bytes: int
    total_bytes: int
    aliases: tuple[tuple[str, str], ...] = ()  # (name, the entry it shares storage with): not sent
    extras: tuple[tuple[str, str], ...] = ()  # non-array payload entries (name, text)

    @property
    def num_buckets(self) -> int:
        return -(-self.total_bytes // self.bucket_bytes)

    def bucket_span(self, index: int) -> tuple[int, int]:
        """The stream bytes ``[lo, hi)`` of bucket ``index``."""
        lo = index * self.bucket_bytes
        return lo, min(lo + self.bucket_bytes, self.total_bytes)

    def entries_in(self, index: int) -> list[TensorEntry]:
        """The entries with bytes in bucket ``index``, in stream order."""
        lo, hi = self.bucket_span(index)
        starts = [e.start for e in self.entries]
        first = max(bisect_right(starts, lo) - 1, 0)
        return [e for e in self.entries[first:bisect_right(starts, hi - 1)] if e.end > lo and e.nbytes]

    @property
    def payload_bytes(self) -> int:
        """Bytes of tensor data sent (tied tensors once, alignment padding excluded)."""
        return sum(e.nbytes for e in self.entries)


def as_tensor(value: Any) -> torch.Tensor:
    """A payload value as a tensor (numpy arrays are wrapped, not copied; read-only ones too: never written)."""
    if isinstance(value, torch.Tensor):
        return value.detach()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*not writable.*")
        return torch.from_numpy(np.ascontiguousarray(value))


def _dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown tensor dtype {name!r} in a weight layout")
    return dtype


def _storage_key(t: torch.Tensor) -> tuple:
    return (t.device, t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.stride(), t.dtype)


def plan_layout(state: Mapping[str, Any], bucket_bytes: int) -> WeightLayout:
    """The layout of ``state`` (tensors or numpy arrays; other values are extras) in buckets of
    ``bucket_bytes`` (rounded up to ``ALIGN_BYTES``)."""
    if bucket_bytes < ALIGN_BYTES:
        raise ValueError(f"weight-sync buckets must hold at least {ALIGN_BYTES} bytes, got {bucket_bytes}")
    bucket_bytes = -(-bucket_bytes // ALIGN_BYTES) * ALIGN_BYTES
    entries, aliases, extras, seen = [], [], [], {}
    offset = 0
    for name, value in state.items():
        if not isinstance(value, (torch.Tensor, np.ndarray)):
            extras.append((name, str(value)))
            continue
        tensor = as_tensor(value)
        key = _storage_key(tensor)
        if key in seen:
            aliases.append((name, seen[key]))
            continue
        seen[key] = name
        nbytes = tensor.numel() * tensor.element_size()
        entries.append(TensorEntry(name, str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape), offset,
                                   nbytes))
        offset += -(-nbytes // ALIGN_BYTES) * ALIGN_BYTES
    return WeightLayout(tuple(entries), bucket_bytes, offset, tuple(aliases), tuple(extras))


def tensor_bytes(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor``'s bytes as a flat uint8 tensor (a view when it is contiguous)."""
    flat = tensor.detach().contiguous().reshape(-1)
    return flat.view(torch.uint8) if flat.dtype != torch.uint8 else flat


def fill_bucket(state: Mapping[str, Any], layout: WeightLayout, index: int, out: torch.Tensor) -> torch.Tensor:
    """Pack bucket ``index`` of ``state`` into ``out`` (uint8, at least ``bucket_bytes``); return the filled
    prefix.  Alignment padding is left as it is (receivers never read it)."""
    lo, hi = layout.bucket_span(index)
    for entry in layout.entries_in(index):
        data = tensor_bytes(as_tensor(state[entry.name]))
        a, b = max(entry.start, lo), min(entry.end, hi)
        out[a - lo:b - lo].copy_(data[a - entry.start:b - entry.start])
    return out[:hi - lo]


class Unpacker:
    """Receiver side: ``take(index, bucket)`` for every bucket in order yields the tensors it completes."""

    def __init__(self, layout: WeightLayout, device: Optional[torch.device] = None) -> None:
        self.layout = layout
        self.device = device
        self._staging: dict[str, torch.Tensor] = {}

    def take(self, index: int, bucket: torch.Tensor) -> Iterator[tuple[str, torch.Tensor]]:
        lo, hi = self.layout.bucket_span(index)
        for entry in self.layout.entries_in(index):
            a, b = max(entry.start, lo), min(entry.end, hi)
            if a == entry.start and b == entry.end:  # whole inside this bucket: a view
                yield entry.name, _typed(bucket[a - lo:b - lo], entry)
                continue
            staging = self._staging.get(entry.name)
            if staging is None:
                staging = self._staging[entry.name] = torch.empty(entry.nbytes, dtype=torch.uint8,
                                                                  device=bucket.device)
            staging[a - entry.start:b - entry.start].copy_(bucket[a - lo:b - lo])
            if b == entry.end:
                yield entry.name, _typed(self._staging.pop(entry.name), entry)


def _typed(raw: torch.Tensor, entry: TensorEntry) -> torch.Tensor:
    return raw.view(_dtype(entry.dtype)).view(entry.shape)


def tensor_digest(tensor: torch.Tensor) -> str:
    """SHA-256 of ``tensor``'s bytes (equal digests, same dtype and shape: the same tensor bit for bit)."""
    import hashlib

    data = tensor_bytes(tensor.detach().cpu())
    return hashlib.sha256(data.numpy().data).hexdigest() + f"/{tuple(tensor.shape)}"


def numpy_payload(state: Mapping[str, Any], *, copy: bool = False, tied_once: bool = False) -> dict[str, Any]:
    """``state`` with every tensor as a float32 numpy array (``copy``: never sharing memory with ``state``;
    ``tied_once``: an entry sharing memory with an earlier one is left out, as tied weights may be)."""
    out: dict[str, Any] = {}
    seen: set[tuple] = set()
    for name, value in state.items():
        if tied_once and isinstance(value, (torch.Tensor, np.ndarray)):
            key = _storage_key(as_tensor(value))
            if key in seen:
                continue
            seen.add(key)
        if isinstance(value, torch.Tensor):
            value = value.detach().float().cpu().numpy()
        if isinstance(value, np.ndarray):
            dtype = np.float32 if value.dtype.kind == "f" else value.dtype
            value = np.array(value, dtype=dtype, copy=True) if copy else np.asarray(value, dtype=dtype)
        out[name] = value
    return out
