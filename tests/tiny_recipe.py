"""The embedded default model's recipe at test size, written once: the model tests fingerprint it, build it (slow
tests only: seconds) and play its untrained tokenizer and weights (fast tests).

``TINY_RECIPE`` is the real build -- tokenizer, both SFT phases, the seat check -- on ``POLICY_TINY_ARCH`` (the
shared tiny architecture, tests/tiny_arch.py) with a context that holds a whole game prompt, one training seed and
one step per SFT phase: it checks the pipeline, not the model's quality.
"""

from __future__ import annotations

from tiny_arch import POLICY_TINY_ARCH, POLICY_WIDE_CONTEXT
from training.config.model import ArchitectureConfig, DefaultModelConfig, SFTHyperParams

TINY_RECIPE = DefaultModelConfig(
    vocab_size=600,
    architecture=ArchitectureConfig(**{**POLICY_TINY_ARCH, "max_position_embeddings": POLICY_WIDE_CONTEXT}),
    sft=SFTHyperParams(lm_steps=1, completion_steps=1, lab_manager_steps=1, per_device_train_batch_size=4,
                       logging_steps=1),
    n_train_seeds=1,
    max_new_tokens=32,
)
