"""How long a new Ray rollout worker may take to load its models (``rollout.ready_timeout_s``).

Loading is reading the weight files (and, for vLLM, allocating the KV cache and capturing CUDA graphs), so the
default grows with the policy's weights: ``READY_BASE_S`` plus ``READY_S_PER_GIB`` for every GiB of its weight
files (a 7B model in bfloat16, 15 GiB: 630 s).  A configured value replaces it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

#: What any worker gets: starting the actor, importing torch and transformers (or vLLM), a small model.
READY_BASE_S = 180.0
#: Per GiB of weight files: a cold read at ~100 MB/s plus the engine's own set-up, with room to spare.
READY_S_PER_GIB = 30.0
#: Files that hold a checkpoint's weights.
WEIGHT_GLOBS = ("*.safetensors", "*.bin", "*.pt")
GIB = float(2**30)


def weight_files_gib(model_dir: str | Path) -> float:
    """GiB of weight files in ``model_dir`` (0 when it is not a local directory)."""
    path = Path(model_dir).expanduser()
    if not path.is_dir():
        return 0.0
    return sum(f.stat().st_size for pattern in WEIGHT_GLOBS for f in path.glob(pattern) if f.is_file()) / GIB


def ready_timeout_s(model_dir: str | Path, configured: Optional[float] = None) -> float:
    """Seconds to wait for a worker loading ``model_dir``: ``configured``, else the size-scaled default."""
    if configured is not None:
        return float(configured)
    return READY_BASE_S + READY_S_PER_GIB * weight_files_gib(model_dir)
