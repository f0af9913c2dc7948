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
from replicalab.parsing import ACTION_MODELS, field_order, format_action, parse_action
from replicalab.scenarios import cells
from replicalab.seats import scripted_agent
from replicalab.seeds import VALIDATION_SEEDS

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


@pytest.mark.slow
def test_a_tiny_trained_tokenizer_spells_every_canonical_action_under_its_grammar(policy_tiny_model_dir, replies):
    _check_allowed(_grammar(policy_tiny_model_dir), replies)


@pytest.fixture(scope="module")
def default_policy():
    from training.model.default import resolve_default_model
    from training.rollout.policy import PolicyModel

    return PolicyModel(str(resolve_default_model()), device="cpu")


def test_constrained_replies_are_their_roles_json_actions_sampled_exactly(default_policy):
    """Sampled at 1.0 from prompts the model never saw, every finished reply is one JSON object of its role's
    fields in canonical order, and each recorded log-prob is the masked distribution's."""
    from training.config.model import SamplingConfig

    chats = [[{"role": "user", "content": f"Case {i}: the plan needs {i} days. Your move."}] for i in range(6)]
    roles = ["scientist", "lab_manager"] * 3
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=200, seed=5, constrained=True)
    gens = default_policy.generate(chats, sampling, roles=roles)
    finished = [(g, r) for g, r in zip(gens, roles) if g.finished]
    assert len(finished) >= 4
    for g, role in finished:
        obj = json.loads(g.text)
        order = field_order(ACTION_MODELS[role])
        assert list(obj) == sorted(obj, key=order.index), g.text
        assert all(len(v) <= 256 for v in obj.values() if isinstance(v, str))
    for g, role in zip(gens, roles):
        ids = torch.tensor([g.completion_ids])
        allowed = default_policy.grammar.completion_masks([role], ids, torch.ones_like(ids))[0]
        with torch.no_grad():
            logits = default_policy.model(torch.tensor([g.prompt_ids + g.completion_ids])).logits[0]
        masked = logits[len(g.prompt_ids) - 1:-1].masked_fill(~allowed, float("-inf")).log_softmax(-1)
        fresh = masked.gather(1, ids[0][:, None])[:, 0]
        assert torch.allclose(torch.tensor(g.logprobs), fresh, atol=1e-4)
        assert all(math.isfinite(x) for x in g.logprobs)


def test_constrained_sampling_needs_each_prompts_role(default_policy):
    from training.config.model import SamplingConfig

    with pytest.raises(ValueError, match="one role per prompt"):
        default_policy.generate_ids([[1, 2]], SamplingConfig(constrained=True))


def test_a_constrained_run_refuses_the_vllm_engine():
    from pydantic import ValidationError

    from training.config.rollout import RolloutConfig

    with pytest.raises(ValidationError, match="constrained decodes with the hf engine"):
        RolloutConfig(backend="ray", engine="vllm", sampling={"temperature": 1.0, "constrained": True})
    assert RolloutConfig(sampling={"temperature": 1.0, "constrained": True}).sampling.constrained


def test_constrained_decoding_needs_a_fast_tokenizer():
    from training.errors import UserInputError
    from training.rollout.grammar import ActionGrammar

    class Slow:
        is_fast = False

    with pytest.raises(UserInputError, match="fast"):
        ActionGrammar(Slow(), [2], 10)
