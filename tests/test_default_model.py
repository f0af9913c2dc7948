"""The embedded default model pipeline on a tiny config, and model agents in real episodes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from replicalab import HELDOUT_SEEDS, TEMPLATES, TRAIN_SEEDS, ReplicaLabEnv, run_episode
from replicalab.models import EpisodeLog
from training.default_model import build_default_model, resolve_default_model
from training.model_agent import GREEDY, EpisodeSpec, ModelAgent, load_agent_spec, run_episodes_batched
from training.model_config import ArchitectureConfig, DefaultModelConfig, SamplingConfig, SFTHyperParams
from training.policy import PolicyModel

#: Few SFT steps on one seed: exercises the whole build in seconds (the model will not play well).
TINY_BUILD = DefaultModelConfig(
    vocab_size=600,
    architecture=ArchitectureConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048),
    sft=SFTHyperParams(lm_steps=1, completion_steps=2, per_device_train_batch_size=4, logging_steps=1),
    n_train_seeds=1,
    max_new_tokens=32,
)
SHORT = SamplingConfig(max_new_tokens=32, seed=0)


@pytest.fixture(scope="module")
def built_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_default_model(tmp_path_factory.mktemp("default-model") / "model", TINY_BUILD, progress=False)


@pytest.fixture(scope="module")
def tiny_policy(built_dir: Path) -> PolicyModel:
    return PolicyModel(str(built_dir), sampling=SHORT, device="cpu")


def test_build_writes_a_standard_checkpoint(built_dir: Path) -> None:
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                 "generation_config.json", "README.md", "build_info.json"):
        assert (built_dir / name).is_file(), name
    assert not built_dir.with_name(built_dir.name + ".building").exists()
    info = json.loads((built_dir / "build_info.json").read_text())
    seeds = info["transcripts"]["seeds"]
    assert seeds and all(s in TRAIN_SEEDS and s not in HELDOUT_SEEDS for s in seeds)
    assert [p["steps"] for p in info["sft_phases"]] == [TINY_BUILD.sft.lm_steps, TINY_BUILD.sft.completion_steps]
    assert [p["completion_only"] for p in info["sft_phases"]] == [False, True]
    assert info["max_example_tokens"] <= info["sft"]["max_length"]
    assert "TRAIN_SEEDS" in (built_dir / "README.md").read_text()


def test_checkpoint_reloads_offline_with_identical_token_ids(built_dir: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(built_dir))
    model = AutoModelForCausalLM.from_pretrained(str(built_dir))
    text = '{"action_type":"propose_protocol","sample_size":12,"technique":"mtt_assay"} Café — 3.5'
    assert tokenizer.decode(tokenizer.encode(text)) == text
    assert model.config.vocab_size == len(tokenizer)
    assert tokenizer.eos_token_id in model.generation_config.eos_token_id


@pytest.mark.parametrize("role", ["scientist", "lab_manager"])
def test_model_agent_plays_full_episode(tiny_policy: PolicyModel, role: str) -> None:
    agent = ModelAgent(tiny_policy, role, SHORT)  # type: ignore[arg-type]
    scientist, lab = (agent, None) if role == "scientist" else (load_scientist(), agent)
    log = run_episode(ReplicaLabEnv(), scientist, lab, seed=HELDOUT_SEEDS[0], template=TEMPLATES[0],
                      difficulty="easy")
    assert isinstance(log, EpisodeLog)
    assert len(agent.generations) == sum(t.role == role for t in log.turns) >= 1


def load_scientist():
    from replicalab.agents import AdaptiveScientist

    return AdaptiveScientist()


@pytest.mark.parametrize("role", ["scientist", "lab_manager"])
def test_batched_episodes_return_logs_and_generations(tiny_policy: PolicyModel, role: str) -> None:
    specs = [EpisodeSpec(HELDOUT_SEEDS[i], TEMPLATES[i % len(TEMPLATES)], d)
             for i, d in enumerate(["easy", "medium", "hard"])]
    rollouts = run_episodes_batched(tiny_policy, role, specs, sampling=SHORT)  # type: ignore[arg-type]
    assert [r.spec for r in rollouts] == specs
    for rollout in rollouts:
        assert rollout.log.seed == rollout.spec.seed
        turns = [t for t in rollout.log.turns if t.role == role]
        assert len(rollout.generations) == len(turns) >= 1
        for gen in rollout.generations:
            assert len(gen.completion_ids) == len(gen.logprobs) and all(x <= 0 for x in gen.logprobs)


def test_batched_greedy_matches_one_at_a_time(tiny_policy: PolicyModel) -> None:
    spec = EpisodeSpec(HELDOUT_SEEDS[1], TEMPLATES[0], "medium")
    greedy = GREEDY.model_copy(update={"max_new_tokens": 32})
    agent = ModelAgent(tiny_policy, "scientist", greedy)
    log = run_episode(ReplicaLabEnv(), agent, None, seed=spec.seed, template=spec.template,
                      difficulty=spec.difficulty)
    (batched,) = run_episodes_batched(tiny_policy, "scientist", [spec], sampling=greedy)
    assert batched.log == log


def test_load_agent_spec_and_resolve(built_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REPLICALAB_DEFAULT_MODEL", str(built_dir))
    assert resolve_default_model() == built_dir  # present: no rebuild
    agent = load_agent_spec("model:default", "scientist", device="cpu")()
    assert agent.policy.name_or_path == str(built_dir)
    assert load_agent_spec(f"model:{built_dir}", "lab_manager", device="cpu")().role == "lab_manager"


@pytest.mark.slow
def test_full_default_model_meets_targets(tmp_path: Path) -> None:
    """The real build: under 10 minutes, >= 95% parseable turns per seat, Scientist >= NaiveScientist."""
    from training.model_eval import evaluate_model_seats

    out = build_default_model(tmp_path / "model", progress=False)
    info = json.loads((out / "build_info.json").read_text())
    assert info["build_seconds"] < 600
    report = evaluate_model_seats(out, list(HELDOUT_SEEDS)[:5])
    assert report.scientist.parse_rate >= 0.95 and report.lab_manager.parse_rate >= 0.95
    assert report.scientist.mean_reward >= report.naive_scientist_mean_reward
