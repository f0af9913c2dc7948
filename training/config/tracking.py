"""``wandb``: the Weights & Biases sink of a run, at the driver only (``training.tracking``; torch-free)."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, Field

from training.config.loading import STRICT_NUMBERS_AS_STR


class WandbConfig(BaseModel):
    """Weights & Biases sink (driver only).  ``offline`` needs no key; ``disabled`` imports nothing."""

    model_config = STRICT_NUMBERS_AS_STR
    mode: Literal["offline", "online", "disabled"] = Field(default="offline", description=(
        "W&B mode: offline (local files, no key; sync later), online (needs a login), disabled (no wandb "
        "import; metrics.jsonl is written anyway)."))
    project: str = Field(default="replicalab", description="W&B project name.")
    entity: Optional[str] = Field(default=None, description="W&B user or team; None: the login's default entity.")
    group: Optional[str] = Field(default=None, description=(
        "W&B run group (a sweep sets it to the sweep's name); None: ungrouped."))
    tags: list[str] = Field(default_factory=list, description="W&B run tags.")
    transcripts_per_step: int = Field(default=4, ge=0, description=(
        "Episode transcripts per logged step in the W&B episodes table (spread over the step's episodes); "
        "0: none.  episodes.jsonl always holds every episode."))
