"""Shared fixtures and the test tiers.  Keep additions namespaced (prefix by area) and cheap.

Tiers: ``pytest -m "not slow"`` is the fast tier (no Ray cluster, no default-model build, no training;
under two minutes on 2 cores); ``pytest`` runs everything (CI).  A test that starts Ray, builds the
default model or trains is marked ``@pytest.mark.slow``; the guard below fails a fast-tier test (or a
fixture it uses) that calls ``ray.init``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Iterator

import pytest

from tiny_arch import POLICY_TINY_ARCH, POLICY_WIDE_CONTEXT

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

#: SFT steps of ``policy_sft_model_dir``.
POLICY_SFT_STEPS = 4


class RayInFastTier(RuntimeError):
    """Raised by ``ray.init`` inside a test that is not marked slow."""


def _forbid_ray_init(item: pytest.Item) -> Iterator[None]:
    """While ``item`` (not marked slow) sets up or runs, ``ray.init`` raises ``RayInFastTier``."""
    if item.get_closest_marker("slow") is not None:
        yield
        return
    try:
        import ray
    except ImportError:  # core install: nothing can start Ray
        yield
        return
    real = ray.init

    def refuse(*args, **kwargs):
        raise RayInFastTier(f"{item.nodeid} starts Ray: mark it @pytest.mark.slow (the fast tier runs without "
                            "a Ray cluster)")

    ray.init = refuse
    try:
        yield
    finally:
        ray.init = real


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    yield from _forbid_ray_init(item)  # fixtures (a session-scoped Ray included) set up here


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    yield from _forbid_ray_init(item)


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[None]:
    """One local Ray session (2 CPUs) for the slow tests that use it, started here unless one is up."""
    ray = pytest.importorskip("ray")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
    yield
    if started:
        ray.shutdown()


def policy_synthetic_examples(n: int = 24) -> list[dict]:
    """Chat prompt/completion examples shaped like the game's (JSON completions), no game needed."""
    examples = []
    for i in range(n):
        prompt = [
            {"role": "system", "content": "You are the Scientist. Reply with exactly one JSON object."},
            {"role": "user", "content": f"Paper: effect {i}. Method: use centrifuge and dmso; n={i + 3}."},
        ]
        completion = ('{"action_type":"propose_protocol","sample_size":%d,"technique":"assay",'
                      '"required_equipment":["centrifuge"],"rationale":"as in the paper"}' % (i + 3))
        examples.append({"prompt": prompt, "completion": [{"role": "assistant", "content": completion}]})
    return examples


def _policy_texts() -> list[str]:
    return [m["content"] for ex in policy_synthetic_examples() for m in (*ex["prompt"], *ex["completion"])]


def _policy_tiny_config():
    from training.config.model import ArchitectureConfig, DefaultModelConfig, SFTHyperParams

    return DefaultModelConfig(architecture=ArchitectureConfig(**POLICY_TINY_ARCH),
                              sft=SFTHyperParams(lm_steps=0, completion_steps=POLICY_SFT_STEPS,
                                                 per_device_train_batch_size=4, logging_steps=1))


@pytest.fixture(scope="session")
def policy_tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Qwen2 checkpoint with random weights + a BPE tokenizer trained on synthetic chat text.

    No training: fast-tier tests of the policy engine, agents and play loop use it (they check shapes,
    log-probs, padding and episode bookkeeping, not the quality of what the model says).
    """
    from training.model.default import make_model
    from training.model.tokenizer import save_and_verify, train_tokenizer

    out = tmp_path_factory.mktemp("policy-tiny-model")
    texts = _policy_texts()
    tokenizer = train_tokenizer(texts, vocab_size=400, min_frequency=1)
    model = make_model(_policy_tiny_config(), len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id)
    model.save_pretrained(str(out))
    save_and_verify(tokenizer, out, probes=texts[:4])
    return out


@pytest.fixture(scope="session")
def policy_sft_model_dir(policy_tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``policy_tiny_model_dir`` after ``POLICY_SFT_STEPS`` SFT steps (TRL ``SFTTrainer``: slow tests only).

    The directory also holds ``sft_changed.txt``: how many parameter tensors SFT changed / total.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from training.model.sft import run_sft, sequence_lengths

    out = tmp_path_factory.mktemp("policy-sft-model")
    for item in policy_tiny_model_dir.iterdir():
        shutil.copy(item, out / item.name)
    model = AutoModelForCausalLM.from_pretrained(str(out))
    tokenizer = AutoTokenizer.from_pretrained(str(out))
    examples = policy_synthetic_examples()
    hp = _policy_tiny_config().sft
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    run_sft(model, tokenizer, examples, hp, max_length=max(sequence_lengths(tokenizer, examples)),
            max_steps=hp.completion_steps, progress=False)
    changed = sum(not torch.equal(before[k], v) for k, v in model.state_dict().items())
    model.save_pretrained(str(out))
    (out / "sft_changed.txt").write_text(f"{changed}/{len(before)}\n")
    return out


@pytest.fixture(scope="session")
def policy_wide_model_dir(policy_tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``policy_tiny_model_dir`` with a context window that holds a whole game prompt (RoPE: the weights do
    not depend on it), so episodes run several model turns instead of overflowing."""
    import json

    out = tmp_path_factory.mktemp("policy-wide-model")
    for item in policy_tiny_model_dir.iterdir():
        shutil.copy(item, out / item.name)
    config = json.loads((out / "config.json").read_text())
    config["max_position_embeddings"] = POLICY_WIDE_CONTEXT
    (out / "config.json").write_text(json.dumps(config))
    return out


@pytest.fixture(scope="session")
def policy_coin_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny checkpoint whose every Scientist turn is one of five replies with equal probability, so GRPO
    groups differ in reward by construction (``tests/coin_model.py``: how, and the probability bound)."""
    from coin_model import build_coin_model

    return build_coin_model(tmp_path_factory.mktemp("policy-coin-model"), _policy_texts())


#: What enable_full_determinism sets for the process; restored after the test.
DETERMINISM_ENV = ("CUDA_LAUNCH_BLOCKING", "CUBLAS_WORKSPACE_CONFIG", "ASCEND_LAUNCH_BLOCKING", "HCCL_DETERMINISTIC",
                   "FLASH_ATTENTION_DETERMINISTIC")


@pytest.fixture
def process_determinism(monkeypatch):
    """Leave the process as it was after a ``deterministic: true`` run: the environment and torch's flags."""
    import torch

    for name in DETERMINISM_ENV:
        if name in os.environ:
            monkeypatch.setenv(name, os.environ[name])
        else:
            monkeypatch.delenv(name, raising=False)
    before = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic,
              torch.backends.cudnn.benchmark)
    yield
    torch.use_deterministic_algorithms(before[0])
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = before[1], before[2]
