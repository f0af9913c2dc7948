"""``RowSampler``: each row draws exactly from its own processed distribution with a stream of its own."""

from __future__ import annotations

import math

import torch

from training.rollout.generation import RowSampler

#: Draws per row in the frequency test, and the tolerance in standard errors of a draw's frequency.
DRAWS, SIGMAS = 20_000, 5.0


def _draw(sampler: RowSampler, scores: torch.Tensor) -> list[int]:
    """The token each row takes: the only finite score ``sampler`` leaves."""
    out = sampler(torch.zeros((scores.shape[0], 1), dtype=torch.long), scores.clone())
    assert torch.isfinite(out).sum(dim=1).tolist() == [1] * scores.shape[0]
    return out.argmax(dim=1).tolist()


def test_frequencies_are_the_distribution_and_zero_probability_is_never_drawn() -> None:
    probs = torch.tensor([0.5, 0.0, 0.3, 0.15, 0.05, 0.0])
    rows = 8
    scores = probs.log().expand(rows, -1).contiguous()  # log 0 = -inf: a masked or filtered token
    sampler = RowSampler(list(range(rows)))
    counts = torch.zeros(len(probs))
    for _ in range(DRAWS // rows):
        for token in _draw(sampler, scores):
            counts[token] += 1
    n = counts.sum().item()
    assert counts[1] == 0 and counts[5] == 0
    for p, c in zip(probs.tolist(), counts.tolist()):
        assert abs(c / n - p) <= SIGMAS * math.sqrt(p * (1 - p) / n) + 1e-12, (p, c / n)


def test_a_row_draws_the_same_alone_in_any_row_of_any_batch() -> None:
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(5, 300, generator=gen)
    seeds = [11, 22, 33, 44, 55]
    together = RowSampler(seeds)
    alone = RowSampler([33])
    reversed_rows = RowSampler(seeds[::-1])
    for _ in range(20):
        batch = _draw(together, logits)
        assert _draw(alone, logits[2:3]) == [batch[2]]
        assert _draw(reversed_rows, logits.flip(0)) == batch[::-1]


def test_seeds_give_streams_of_their_own() -> None:
    logits = torch.zeros(1, 1000)  # uniform over 1000 tokens: two seeds agree on ~1 draw in 1000
    a, b = RowSampler([1]), RowSampler([2])
    draws = [(_draw(a, logits), _draw(b, logits)) for _ in range(50)]
    assert sum(x == y for x, y in draws) <= 3
    again = RowSampler([1])
    assert [_draw(again, logits) for _ in range(50)] == [x for x, _ in draws]
