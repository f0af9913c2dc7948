"""The hand-wired copy (induction) circuit: before any training, a model with the default architecture
predicts the continuation of a repeated random token sequence; the same model without it does not."""

from __future__ import annotations

import pytest
import torch

from training.config.model import ArchitectureConfig, DefaultModelConfig
from training.model.default import make_model

VOCAB = 2000
HALF = 64


def _copies(copy_circuit: bool, half: int = HALF, **arch: float) -> tuple[float, float]:
    """Accuracy and mean probability of predicting the second copy of a random token sequence."""
    cfg = DefaultModelConfig(architecture=ArchitectureConfig(copy_circuit=copy_circuit, **arch))
    model = make_model(cfg, VOCAB, pad_id=0, eos_id=1).eval()
    g = torch.Generator().manual_seed(3)
    first = torch.randperm(VOCAB - 3, generator=g)[:half] + 3  # distinct tokens: each has one "next"
    ids = torch.cat([first, first]).unsqueeze(0)
    with torch.no_grad():
        probs = model(input_ids=ids).logits[0, half:-1].softmax(-1)
    # position half + i - 1 (token first[i-1], second copy) should predict first[i]
    target = ids[0, half + 1:]
    accuracy = (probs.argmax(-1) == target).float().mean().item()
    return accuracy, probs.gather(1, target[:, None]).mean().item()


def _copy_accuracy(copy_circuit: bool, half: int = HALF, **arch: float) -> float:
    return _copies(copy_circuit, half, **arch)[0]


def test_copy_circuit_copies_before_training() -> None:
    assert _copy_accuracy(True) >= 0.9
    assert _copy_accuracy(False) <= 0.1


def test_copy_circuit_tells_a_quarter_of_the_vocabulary_apart() -> None:
    # the copied value spans the whole head: with only the query/key code dims, about 2% of 500 copies
    # read as another token
    assert _copy_accuracy(True, half=VOCAB // 4, copy_recency=0.0) >= 0.99
    # the shipped recency term (a pull toward nearer matches) costs a few of 500 copies made 500 tokens back
    assert _copy_accuracy(True, half=VOCAB // 4) >= 0.95


def test_copy_scale_makes_the_copy_more_confident() -> None:
    _, weak = _copies(True, copy_scale=1.0)
    _, strong = _copies(True, copy_scale=10.0)
    assert weak < 0.9 < strong


def test_copy_circuit_rejects_an_architecture_it_cannot_wire() -> None:
    cfg = DefaultModelConfig(architecture=ArchitectureConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                                             num_attention_heads=4, rope_theta=1e4))
    with pytest.raises(ValueError, match="copy circuit needs"):
        make_model(cfg, 100, pad_id=0, eos_id=1)


def _later_copy_share(recency: float, gap: int = 200) -> float:
    """P(later continuation) / P(either continuation) for a token seen twice before, with different
    successors ``gap`` filler tokens apart."""
    cfg = DefaultModelConfig(architecture=ArchitectureConfig(copy_recency=recency))
    model = make_model(cfg, VOCAB, pad_id=0, eos_id=1).eval()
    g = torch.Generator().manual_seed(5)
    tokens = torch.randperm(VOCAB - 3, generator=g)[: 2 * gap + 3] + 3
    cue, earlier, later, filler = tokens[0], tokens[1], tokens[2], tokens[3:]
    ids = torch.cat([cue[None], earlier[None], filler[:gap], cue[None], later[None], filler[gap:], cue[None]])
    with torch.no_grad():
        probs = model(input_ids=ids[None]).logits[0, -1].softmax(-1)
    return (probs[later] / (probs[later] + probs[earlier])).item()


def test_copy_recency_prefers_the_latest_place_to_copy_from() -> None:
    """Without the recency term the induction head splits between two matches; with it (the default)
    the one nearer the current token wins, even when they are only a line of text apart."""
    assert 0.3 < _later_copy_share(0.0) < 0.7
    assert _later_copy_share(12.0, gap=30) > 0.9



def _after_a_repeat(self_match: float, recency: float = 12.0, half: int = HALF, k: int = 40) -> tuple[float, ...]:
    """At a token that repeats the one before it, in the second copy of a random sequence: the induction
    head's attention to its own position and to the place after the token's first occurrence, and the
    probabilities of the token once more (the loop) and of what followed its first occurrence."""
    cfg = DefaultModelConfig(architecture=ArchitectureConfig(copy_recency=recency, copy_self_match=self_match))
    model = make_model(cfg, VOCAB, pad_id=0, eos_id=1).eval()
    model.set_attn_implementation("eager")  # attention weights are returned by the eager kernel only
    g = torch.Generator().manual_seed(3)
    first = torch.randperm(VOCAB - 3, generator=g)[:half] + 3  # distinct tokens
    ids = torch.cat([first, first[:k], first[k - 1:k]])  # ..., first[k-1], first[k-1]
    with torch.no_grad():
        out = model(input_ids=ids[None], output_attentions=True)
    attention = out.attentions[1][0, 0, -1]  # layer 1, head 0: the induction head, from the last token
    probs = out.logits[0, -1].softmax(-1)
    return attention[-1].item(), attention[k].item(), probs[first[k - 1]].item(), probs[first[k]].item()


def test_a_repeated_token_does_not_copy_itself() -> None:
    """After ``a a`` the query's own position matches (its previous token is the current one) at distance 0,
    the nearest match of all; with the self-match penalty (the default) it loses to the place after the
    token's earlier occurrence, so the copy goes on with what followed it instead of writing ``a`` again."""
    own, earlier, again, follows = _after_a_repeat(self_match=0.0)
    assert own > earlier and again > 0.5  # the old circuit: distance 0 wins and the copy loops
    own, earlier, again, follows = _after_a_repeat(self_match=ArchitectureConfig().copy_self_match)
    assert own < 0.01 and earlier > 0.5
    assert again < 0.01 and follows > 0.9
