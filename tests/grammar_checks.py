"""Checks of the action grammars (``training.rollout.grammar``) shared by their tests."""

from __future__ import annotations

import torch


def refused_tokens(policy, key: str, text: str) -> list[int]:
    """The positions of ``text``'s tokens (and its stop token) grammar ``key`` refuses; for a text it allows,
    checks that no stop token was allowed before the object closed."""
    tok, stop = policy.tokenizer, policy.stop_token_ids[0]
    ids = tok.encode(text, add_special_tokens=False) + [stop]
    masks = policy.grammar.completion_masks([key], torch.tensor([ids]), torch.ones(1, len(ids)))[0]
    found = [i for i, tok_id in enumerate(ids) if not masks[i, tok_id]]
    assert found or not masks[:-1, stop].any(), "a stop token allowed before the object closed"
    return found
