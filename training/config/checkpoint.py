"""``checkpoint``: how often a training run checkpoints and how many checkpoints it keeps (torch-free)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from training.config.loading import STRICT_NUMBERS_AS_STR


class CheckpointConfig(BaseModel):
    """Checkpoint every ``save_steps`` optimizer steps, keeping the newest ``save_total_limit``."""
    model_config = STRICT_NUMBERS_AS_STR
    save_steps: int = Field(default=10, ge=1, description=(
        "Optimizer steps between checkpoints (checkpoint-N under the run's checkpoints/)."))
    save_total_limit: int = Field(default=3, ge=1, description=(
        "Newest checkpoints kept; older ones are deleted."))
