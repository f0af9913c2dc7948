"""``lora``: LoRA adapters (PEFT) that train instead of every weight (torch-free)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from training.config.loading import STRICT_NUMBERS_AS_STR


class LoraConfig(BaseModel):
    """LoRA adapters through PEFT: only the adapters train and travel to rollout workers each step;
    ``final/`` holds the merged full model (and the adapter under ``final/adapter``)."""

    model_config = STRICT_NUMBERS_AS_STR
    enabled: bool = Field(default=False, description="Train LoRA adapters instead of the full weights.")
    r: int = Field(default=8, ge=1, description="Adapter rank.")
    alpha: float = Field(default=16.0, gt=0.0, description="LoRA scaling numerator (the update is scaled by alpha / r).")
    dropout: float = Field(default=0.0, ge=0.0, lt=1.0, description=(
        "Dropout on the adapter input during training (off while scoring rollouts)."))
    target_modules: list[str] = Field(default_factory=lambda: ["all-linear"], description=(
        "Module names (or suffixes) that get adapters; all-linear: every linear layer but the output head."))
