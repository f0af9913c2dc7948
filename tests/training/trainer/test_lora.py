"""LoRA through PEFT: rollout workers load only the adapter, a training run changes the adapter (on
``policy_coin_model_dir``, whose groups differ in reward by construction), and the merged ``final/`` evaluates
like any checkpoint."""

from __future__ import annotations

import json
import os

import pytest

from coin_model import COIN_OVERRIDES
from training.config.model import SamplingConfig


def test_adapter_payload_reproduces_the_peft_model(policy_tiny_model_dir):
    """A worker's PolicyModel given the trainer's adapter payload computes the trainer's logits; the payload
    holds adapter weights only, and a second payload replaces the first."""
    import torch
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    from training.config.train import TrainConfig
    from training.rollout.policy import LORA_CONFIG_KEY, PolicyModel
    from training.trainer.weights import lora_peft_config, payload_bytes, policy_weights

    cfg = TrainConfig(lora={"enabled": True, "r": 4, "alpha": 8})
    trained = get_peft_model(AutoModelForCausalLM.from_pretrained(str(policy_tiny_model_dir)), lora_peft_config(cfg.lora))
    worker = PolicyModel(str(policy_tiny_model_dir), device="cpu")
    full = sum(p.numel() * 4 for p in worker.model.parameters())
    ids = torch.tensor([list(range(3, 40))])
    for seed in (0, 1):
        torch.manual_seed(seed)
        with torch.no_grad():
            for name, p in trained.named_parameters():
                if "lora_" in name:
                    p.normal_(0, 0.5)
        payload = policy_weights(trained, cfg.lora)
        assert LORA_CONFIG_KEY in payload and all("lora_" in k for k in payload if k != LORA_CONFIG_KEY)
        assert 0 < payload_bytes(payload) < full / 2
        worker.load_state(payload, version=seed + 1)
        with torch.no_grad():
            expected = trained.eval()(ids).logits
            got = worker.model(ids).logits
            base = trained.get_base_model()
        assert torch.allclose(expected, got, atol=1e-5)
        assert worker.weights_version == seed + 1
    with trained.disable_adapter(), torch.no_grad():
        assert not torch.allclose(base(ids).logits, got, atol=1e-3)  # the adapter really changes the model
    gens = worker.generate([[{"role": "user", "content": "hi"}]], SamplingConfig(max_new_tokens=4, seed=0))
    assert len(gens[0].completion_ids) == len(gens[0].logprobs) > 0


def test_lora_config_block_defaults_off():
    from training.config.train import TrainConfig
    from training.trainer.weights import lora_peft_config

    assert TrainConfig().lora.enabled is False and lora_peft_config(TrainConfig().lora) is None
    for name, field in type(TrainConfig().lora).model_fields.items():
        assert field.description, name
    with pytest.raises(ValueError):
        TrainConfig(lora={"enabled": True, "r": 0})


@pytest.mark.slow
def test_lora_run_changes_the_adapter_and_the_merged_final_evaluates(policy_coin_model_dir, tmp_path, monkeypatch):
    import subprocess
    import sys

    from safetensors.torch import load_file

    from training.config.train import load_train_config
    from training.trainer.run import run_train

    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # 2 steps x 2 groups of 4 episodes of the coin model (tests/coin_model.py): that no group has reward variance
    # (and B stays zero) has probability at most 0.008 ** 4 = 4.1e-9, on any CPU and sampling seed
    model = str(policy_coin_model_dir)
    cfg = load_train_config("configs/train/default.yaml", [
        "lora.enabled=true", "lora.r=4", "grpo.learning_rate=5e-3", "grpo.max_steps=2", "grpo.groups_per_step=2",
        "grpo.num_generations=4", "rollout.backend=inprocess", *COIN_OVERRIDES,
        "rollout.sampling.max_new_tokens=128", "wandb.mode=offline", f"model={model}",
        f"output_dir={tmp_path}", "run_name=lora"])
    summary = run_train(cfg)
    final = tmp_path / "lora" / "final"
    adapter = load_file(str(final / "adapter" / "adapter_model.safetensors"))
    lora_b = [v for k, v in adapter.items() if "lora_B" in k]
    assert lora_b and any(float(v.abs().max()) > 0 for v in lora_b)  # B starts at zero: training moved it
    base, merged = load_file(os.path.join(model, "model.safetensors")), load_file(str(final / "model.safetensors"))
    assert set(merged) <= set(base) and any(not (merged[k] == base[k]).all() for k in merged)
    metrics = [json.loads(line) for line in (tmp_path / "lora" / "metrics.jsonl").read_text().splitlines()]
    sync = [m["rollout/weight_sync_bytes"] for m in metrics if "rollout/weight_sync_bytes" in m]
    adapter_bytes = sum(v.numel() * 4 for v in adapter.values())
    assert sync and all(s == adapter_bytes for s in sync) and adapter_bytes < sum(v.numel() * 4 for v in base.values()) / 4
    assert summary["steps"] == 2
    done = subprocess.run(
        [sys.executable, "-m", "training.cli", "eval", f"agents=[model:{final}]", "episodes=2",
         "templates=[cell_biology]", "difficulties=[easy]", "backend=inprocess", f"out={tmp_path / 'eval'}",
         "wandb.mode=offline"], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((tmp_path / "eval" / "report.json").read_text())
    assert report["agents"][f"model:{final}"]["overall"]["episodes"] == 2
