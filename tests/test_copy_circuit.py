"""The hand-wired copy (induction) circuit: before any training, a model with the default architecture
predicts the continuation of a repeated random token sequence; the same model without it does not."""

from __future__ import annotations

import pytest
import torch

from training.default_model import make_model
from training.model_config import ArchitectureConfig, DefaultModelConfig

VOCAB = 2000
HALF = 64


def _copy_accuracy(copy_circuit: bool) -> float:
    cfg = DefaultModelConfig(architecture=ArchitectureConfig(copy_circuit=copy_circuit))
    model = make_model(cfg, VOCAB, pad_id=0, eos_id=1).eval()
    g = torch.Generator().manual_seed(3)
    first = torch.randperm(VOCAB - 3, generator=g)[:HALF] + 3  # distinct tokens: each has one "next"
    ids = torch.cat([first, first]).unsqueeze(0)
    with torch.no_grad():
        predicted = model(input_ids=ids).logits[0].argmax(-1)
    # position HALF + i - 1 (token first[i-1], second copy) should predict first[i]
    return (predicted[HALF:-1] == ids[0, HALF + 1:]).float().mean().item()


def test_copy_circuit_copies_before_training() -> None:
    assert _copy_accuracy(True) >= 0.9
    assert _copy_accuracy(False) <= 0.1


def test_copy_circuit_rejects_an_architecture_it_cannot_wire() -> None:
    cfg = DefaultModelConfig(architecture=ArchitectureConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                                             num_attention_heads=4, rope_theta=1e4))
    with pytest.raises(ValueError, match="copy circuit needs"):
        make_model(cfg, 100, pad_id=0, eos_id=1)
