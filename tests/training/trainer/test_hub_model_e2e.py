"""A first run on a fresh Hugging Face cache: the policy and a frozen ``model:`` seat are hub ids, served by a hub
stand-in on localhost (``tests/hub_standin.py``) into an empty cache.  The driver downloads each once before
anything starts; TRL and the Ray rollout workers (offline, with another cache) load the downloaded snapshot.
Slow: Ray and two GRPO steps."""

import json

import pytest
from coin_model import COIN_OVERRIDES
from hub_standin import serve_hub

pytestmark = pytest.mark.slow

HUB_ID = "someone/coin-model"


def test_fresh_cache_run_downloads_once_and_workers_load_the_snapshot(policy_coin_model_dir, ray_cluster, tmp_path,
                                                                      monkeypatch):
    from huggingface_hub import constants

    from training.config.train import load_train_config
    from training.trainer.run import run_train

    cache = tmp_path / "fresh-hf-cache"
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # huggingface_hub read its settings at import
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    with serve_hub({HUB_ID: policy_coin_model_dir}) as hub:
        monkeypatch.setattr(constants, "ENDPOINT", hub.endpoint)
        monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                            hub.endpoint + "/{repo_id}/resolve/{revision}/{filename}")
        cfg = load_train_config("configs/train/default.yaml", [
            "grpo.max_steps=2", "grpo.groups_per_step=1", "grpo.num_generations=4", "rollout.backend=ray",
            "rollout.num_workers=1", "wandb.mode=offline", "checkpoint.save_steps=2", *COIN_OVERRIDES,
            f"model={HUB_ID}", f"seats.lab_manager=model:{HUB_ID}", f"output_dir={tmp_path}"])
        summary = run_train(cfg)
        downloads = [r for r in hub.requests if r.startswith("GET") and "/resolve/" in r]
    snapshot = next(cache.glob("models--someone--coin-model/snapshots/*"))
    assert summary["steps"] == 2 and summary["episodes"] == 8
    # one download of each file for both uses of the id (the policy and the frozen Lab Manager)
    assert downloads and len(downloads) == len(set(downloads))
    assert {r.rsplit("/", 1)[1] for r in downloads} >= {"config.json", "model.safetensors", "tokenizer.json"}
    episodes = [json.loads(line) for line in (cfg.run_dir / "episodes.jsonl").read_text().splitlines()]
    assert len(episodes) == 8  # the Ray worker played every episode with the frozen hub-id Lab Manager
    assert (cfg.run_dir / "final" / "model.safetensors").is_file()
    final = json.loads((cfg.run_dir / "final" / "config.json").read_text())
    assert final["vocab_size"] == json.loads((snapshot / "config.json").read_text())["vocab_size"]
