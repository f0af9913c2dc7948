"""What the launcher put in this process's environment: the GPUs it may see and whether ``accelerate launch``
shards the learner with an FSDP config of its own.

``accelerate launch --use_fsdp`` (accelerate 1.15, ``accelerate/utils/launch.py``) gives its processes both
``ACCELERATE_USE_FSDP=true`` and ``FSDP_VERSION``; only the second says the launcher did it, because an
``Accelerator`` built with an FSDP plugin earlier in this process sets ``ACCELERATE_USE_FSDP`` too
(``accelerate/accelerator.py``), as does accelerate's ``enable_fsdp_ram_efficient_loading``.
"""

from __future__ import annotations

import os
from typing import Optional

#: The GPUs a CUDA process may see, as comma-separated ids.
VISIBLE_DEVICES_ENV = "CUDA_VISIBLE_DEVICES"
#: What only ``accelerate launch`` puts in its processes' environment when its own config shards with FSDP.
LAUNCHED_FSDP_ENV = "FSDP_VERSION"


def visible_gpu_ids() -> Optional[list[str]]:
    """The GPU ids ``CUDA_VISIBLE_DEVICES`` lists (blank entries dropped; an empty list hides every GPU), None
    when it is not set (every GPU visible)."""
    visible = os.environ.get(VISIBLE_DEVICES_ENV)
    return None if visible is None else [v.strip() for v in visible.split(",") if v.strip()]


def launched_fsdp() -> bool:
    """Whether ``accelerate launch`` started this process sharded with its own FSDP config."""
    return LAUNCHED_FSDP_ENV in os.environ
