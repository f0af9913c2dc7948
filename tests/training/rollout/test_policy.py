"""PolicyModel, tokenizer and ModelAgent on a tiny synthetic checkpoint (CPU, seconds)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

from replicalab.models import InvalidAction, LabManagerObservation, ScientistObservation
from training.config.model import IM_END_TOKEN, PAD_TOKEN, SamplingConfig
from training.rollout.agent import ModelAgent, load_agent_spec
from training.rollout.policy import PolicyModel

CHATS = [
    [{"role": "user", "content": "Paper: effect 1. Method: use centrifuge and dmso; n=4."}],
    [
        {"role": "system", "content": "You are the Scientist. Reply with exactly one JSON object."},
        {"role": "user", "content": "Paper: effect 7. Method: use centrifuge and dmso; n=10. " * 5},
    ],
    [{"role": "user", "content": "hi"}],
]
MAX_NEW = 24
#: The sampling these tests use unless one says otherwise (a PolicyModel stores none of its own).
SAMPLING = SamplingConfig(max_new_tokens=MAX_NEW, seed=0)


@pytest.fixture(scope="module")
def policy(policy_tiny_model_dir: Path) -> PolicyModel:
    return PolicyModel(str(policy_tiny_model_dir), device="cpu")


@pytest.fixture(scope="module")
def wide_policy(policy: PolicyModel) -> PolicyModel:
    """The tiny policy with room for a whole game prompt (its tokenizer was not trained on the game)."""
    wide = PolicyModel(model=policy.model, tokenizer=policy.tokenizer, device="cpu")
    wide.max_positions = 4096
    return wide


def test_model_config_module_is_torch_free() -> None:
    code = "import sys, training.config.model; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_sampling_config_rejects_unknown_keys() -> None:
    with pytest.raises(ValidationError):
        SamplingConfig(temprature=0.5)  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        SamplingConfig(temperature=0.0)


@pytest.mark.slow  # loads a checkpoint in a fresh offline process (about 6 s)
def test_checkpoint_loads_offline_with_auto_classes(policy_tiny_model_dir: Path) -> None:
    code = (
        "import os; assert os.environ['HF_HUB_OFFLINE'] == '1'\n"
        "from transformers import AutoModelForCausalLM, AutoTokenizer\n"
        f"d = {str(policy_tiny_model_dir)!r}\n"
        "m = AutoModelForCausalLM.from_pretrained(d); t = AutoTokenizer.from_pretrained(d)\n"
        "assert t.pad_token_id != t.eos_token_id and t.chat_template\n"
        "print(type(t).__name__, m.config.model_type)\n"
    )
    env = {**__import__("os").environ, "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, env=env)
    assert out.stdout.split() == ["Qwen2Tokenizer", "qwen2"]
    gen = json.loads((policy_tiny_model_dir / "generation_config.json").read_text())
    assert gen["pad_token_id"] != gen["eos_token_id"][0]


def test_tokenizer_ids_identical_after_save_and_reload(policy: PolicyModel, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    text = 'Café {"action_type":"accept"}\n  n=12 — ok 你好'
    policy.tokenizer.save_pretrained(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    again = AutoTokenizer.from_pretrained(str(tmp_path))
    assert again.encode(text) == policy.tokenizer.encode(text)
    kwargs = dict(add_generation_prompt=True, tokenize=True, return_dict=False)
    assert again.apply_chat_template(CHATS[1], **kwargs) == policy.tokenizer.apply_chat_template(CHATS[1], **kwargs)
    end = policy.tokenizer.convert_tokens_to_ids(IM_END_TOKEN)
    assert policy.stop_token_ids == (end,)
    assert policy.pad_token_id == policy.tokenizer.convert_tokens_to_ids(PAD_TOKEN) != end


@pytest.mark.slow  # trains (a few SFT steps)
def test_sft_changed_parameters(policy_sft_model_dir: Path) -> None:
    changed, total = map(int, (policy_sft_model_dir / "sft_changed.txt").read_text().split("/"))
    assert changed == total > 0


def test_batched_generate_shapes_logprobs_and_padding(policy: PolicyModel) -> None:
    gens = policy.generate(CHATS, SAMPLING)
    assert len(gens) == len(CHATS)
    for chat, gen in zip(CHATS, gens):
        assert gen.prompt_ids == policy.encode_chat(chat)  # left padding stripped
        assert 0 < len(gen.completion_ids) == len(gen.logprobs) <= MAX_NEW
        assert all(lp <= 0.0 for lp in gen.logprobs)
        stops = [i for i, t in enumerate(gen.completion_ids) if t in policy.stop_token_ids]
        assert stops == ([len(gen.completion_ids) - 1] if gen.finished else [])
        assert isinstance(gen.text, str) and IM_END_TOKEN not in gen.text


def test_logprobs_match_teacher_forcing(policy: PolicyModel) -> None:
    sampling = SamplingConfig(max_new_tokens=MAX_NEW, temperature=0.7, seed=1)
    for gen in policy.generate(CHATS, sampling):
        ids = torch.tensor([gen.prompt_ids + gen.completion_ids])
        with torch.no_grad():
            logits = policy.model(ids).logits[0, len(gen.prompt_ids) - 1 : -1].float() / sampling.temperature
        expected = torch.log_softmax(logits, -1).gather(1, torch.tensor(gen.completion_ids)[:, None])[:, 0]
        assert torch.allclose(expected, torch.tensor(gen.logprobs), atol=1e-4)


def test_static_kv_cache_draws_the_same_tokens_and_logprobs(policy: PolicyModel) -> None:
    dynamic = SamplingConfig(max_new_tokens=MAX_NEW, temperature=0.7)
    static = dynamic.model_copy(update={"kv_cache": "static"})
    prompts = [policy.encode_chat(chat) for chat in CHATS]
    seeds = list(range(len(prompts)))
    for a, b in zip(policy.generate_ids(prompts, dynamic, row_seeds=seeds),
                    policy.generate_ids(prompts, static, row_seeds=seeds)):
        assert a.completion_ids == b.completion_ids
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4)


def test_greedy_is_deterministic(policy: PolicyModel) -> None:
    greedy = SamplingConfig(do_sample=False, max_new_tokens=MAX_NEW)
    first, second = policy.generate(CHATS, greedy), policy.generate(CHATS, greedy)
    assert [g.completion_ids for g in first] == [g.completion_ids for g in second]


def test_long_prompt_is_cut_to_fit(policy: PolicyModel) -> None:
    chat = [{"role": "user", "content": "centrifuge dmso " * 2000}]
    (gen,) = policy.generate([chat], SAMPLING)
    assert gen.prompt_truncated
    assert len(gen.prompt_ids) + policy.max_new_tokens(SAMPLING) <= policy.max_positions


def test_load_state_roundtrip(policy_tiny_model_dir: Path) -> None:
    target = PolicyModel(str(policy_tiny_model_dir), device="cpu")
    state = {k: v * 0.5 for k, v in target.state_numpy().items()}
    target.load_state(state)
    assert target.weights_version == 1
    emb = target.model.get_input_embeddings().weight.detach().numpy()
    assert (abs(emb - state["model.embed_tokens.weight"]) < 1e-6).all()
    with pytest.raises(KeyError):
        target.load_state({"no.such.weight": state["model.embed_tokens.weight"]})


def _scientist_observation() -> ScientistObservation:
    return ScientistObservation(
        paper_title="Effect 3", paper_hypothesis="X raises Y", paper_method="use centrifuge and dmso; n=6",
        paper_key_finding="Y up 20%", experiment_goal="replicate", round_number=0, max_rounds=6,
    )


def test_garbage_model_output_becomes_invalid_action(wide_policy: PolicyModel) -> None:
    policy = wide_policy

    class Garbage(PolicyModel):
        def generate_ids(self, prompts, sampling, **kwargs):  # type: ignore[override]
            return [g.__class__(**{**g.__dict__, "text": "}{ not json ```"})
                    for g in super().generate_ids(prompts, sampling, **kwargs)]

    garbage = Garbage(model=policy.model, tokenizer=policy.tokenizer, device="cpu")
    garbage.max_positions = policy.max_positions
    agent = ModelAgent(garbage, "scientist", SAMPLING)
    action = agent(_scientist_observation())
    assert isinstance(action, InvalidAction) and action.role == "scientist" and len(agent.generations) == 1
    lab_obs = LabManagerObservation(budget_total=100, budget_remaining=100, staff_count=1, time_limit_days=5)
    assert isinstance(ModelAgent(garbage, "lab_manager", SAMPLING)(lab_obs), InvalidAction)


def test_model_agent_prompt_fits_context(wide_policy: PolicyModel) -> None:
    policy = wide_policy
    agent = ModelAgent(policy, "scientist", SAMPLING)
    agent(_scientist_observation())
    (gen,) = agent.generations
    assert len(gen.prompt_ids) + policy.max_new_tokens(SAMPLING) <= policy.max_positions
    assert gen.prompt_ids == policy.encode_chat(agent.chat.messages[:2])
    assert [m["role"] for m in agent.chat.messages] == ["system", "user", "assistant"]


def test_model_agent_turn_past_the_context_window_is_invalid(policy: PolicyModel) -> None:
    """As in rollouts: a prompt that no longer fits is an invalid turn, not a truncated prompt."""
    agent = ModelAgent(policy, "scientist", SAMPLING)  # 512 positions: the game's system prompt alone overflows
    action = agent(_scientist_observation())
    assert isinstance(action, InvalidAction) and "context" in action.error and not agent.generations


def test_load_agent_spec(policy_tiny_model_dir: Path) -> None:
    factory = load_agent_spec(f"model:{policy_tiny_model_dir}", "lab_manager", device="cpu")
    first, second = factory(), factory()
    assert first is not second and first.policy is second.policy and first.role == "lab_manager"
    with pytest.raises(ValueError):
        load_agent_spec("naive", "scientist")
    with pytest.raises(ValueError):
        load_agent_spec("model:", "scientist")
