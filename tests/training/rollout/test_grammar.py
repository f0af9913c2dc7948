"""Constrained decoding (``rollout.sampling.constrained``): the action grammars allow every canonical action and
nothing but the role's JSON action; sampling under them is exact (the recorded log-probs are the masked
distribution's), and the run's config refuses it where it cannot hold."""

from __future__ import annotations

import json
import math

import pytest
import torch

from replicalab import ReplicaLabEnv, run_episode
from replicalab.lab import LAB_POLICIES
from replicalab.parsing import field_order, format_action, parse_action
from replicalab.scenarios import cells
from replicalab.seats import scripted_agent
from replicalab.seeds import VALIDATION_SEEDS
from training.rollout.grammar import ACTION_MODELS, ActionGrammar

SCIENTISTS = ("naive", "reader+defender+asker", "asker")


def _canonical_replies() -> list[tuple[str, str]]:
    """(role, canonical text) of every action the scripted seats take on a spread of validation episodes."""
    env, found = ReplicaLabEnv(), set()
    for t, d in cells():
        for sci in SCIENTISTS:
            for lab in LAB_POLICIES:
                log = run_episode(env, scripted_agent("scientist", sci, VALIDATION_SEEDS[0], t, d), lab,
                                  seed=VALIDATION_SEEDS[0], template=t, difficulty=d)
                for turn in log.turns:
                    if turn.action is not None:
                        action = parse_action(json.dumps(turn.action), turn.role)
                        found.add((turn.role, format_action(action)))
    return sorted(found)


@pytest.fixture(scope="module")
def replies() -> list[tuple[str, str]]:
    return _canonical_replies()


def _grammar(path):
    from training.rollout.policy import PolicyModel

    return PolicyModel(str(path), device="cpu")


def _check_allowed(policy, replies) -> None:
    grammar, tok = policy.grammar, policy.tokenizer
    stop = policy.stop_token_ids[0]
    for role, text in replies:
        ids = tok.encode(text, add_special_tokens=False) + [stop]
        masks = grammar.completion_masks([role], torch.tensor([ids]), torch.ones(1, len(ids)))[0]
        refused = [i for i, tok_id in enumerate(ids) if not masks[i, tok_id]]
        assert not refused, f"{role} {text!r}: token {refused[0]} refused"
        assert not masks[:-1, stop].any(), "a stop token allowed before the object closed"


def test_the_default_tokenizer_spells_every_canonical_action_under_its_grammar(replies):
    from training.model.default import resolve_default_model

    assert len(replies) > 50 and {r for r, _ in replies} == set(ACTION_MODELS)
    _check_allowed(_grammar(resolve_default_model()), replies)


def test_a_tiny_trained_tokenizer_spells_every_canonical_action_under_its_grammar(policy_tiny_model_dir, replies):
    _check_allowed(_grammar(policy_tiny_model_dir), replies)
