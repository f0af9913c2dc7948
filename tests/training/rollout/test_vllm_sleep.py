"""A vLLM engine sharing the learner's GPU sleeps between collects (``rollout.vllm.sleep_between_steps``): GPU only.

The engine runs in the vLLM environment (``launch/setup_vllm.sh``), in a subprocess: it plays a batch, sleeps
(its KV cache and weights leave the GPU: the free memory grows by about the KV cache), and the next generation
wakes it and samples the same tokens for the same seeds."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
#: The engine's share of the GPU: its KV cache takes most of it, and sleeping must hand back at least this much.
GPU_SHARE, FREED_GIB = 0.3, 1.0

pytestmark = pytest.mark.gpu

SCRIPT = r"""
import json, sys
import torch
from training.config.model import SamplingConfig, VLLMConfig
from training.rollout.vllm_policy import VLLMPolicyModel

model = VLLMPolicyModel(sys.argv[1], device="cuda",
                        vllm=VLLMConfig(sleep_between_steps=True, gpu_memory_utilization=float(sys.argv[2])))
sampling = SamplingConfig(temperature=1.0, max_new_tokens=16, seed=7)
prompts = [model.tokenizer.encode(t, add_special_tokens=False) for t in ("plan the assay", "ask for the budget")]
first = [g.completion_ids for g in model.generate_ids(prompts, sampling)]
awake = torch.cuda.mem_get_info()[0]
model.sleep()
asleep = torch.cuda.mem_get_info()[0]
again = [g.completion_ids for g in model.generate_ids(prompts, sampling)]  # wakes it first
print("RESULT " + json.dumps({"freed_gib": (asleep - awake) / 2**30, "same": first == again,
                              "asleep_after_generate": model.asleep, "sleeps": model.sleeps}))
"""


@pytest.fixture(scope="session")
def gpu_vllm() -> str:
    if shutil.which("nvidia-smi") is None:
        pytest.skip("needs CUDA (no nvidia-smi)")
    if not VLLM_PYTHON.exists():
        pytest.skip("no vLLM environment (bash launch/setup_vllm.sh)")
    return str(VLLM_PYTHON)


def test_the_engine_sleeps_between_collects_and_wakes_for_the_next(gpu_vllm: str, tmp_path: Path):
    from standins import build_llama

    model = build_llama(tmp_path / "llama", head_dim=64)
    out = subprocess.run([gpu_vllm, "-c", SCRIPT, str(model), str(GPU_SHARE)], capture_output=True, text=True,
                         timeout=600, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    result = json.loads(next(line for line in out.stdout.splitlines() if line.startswith("RESULT "))[7:])
    assert result["sleeps"] and not result["asleep_after_generate"]
    assert result["freed_gib"] > FREED_GIB, result  # the KV cache (most of the engine's share) left the GPU
    assert result["same"], result  # woken, it samples exactly what it sampled before sleeping


@pytest.mark.slow
def test_a_colocated_training_run_sleeps_the_engine(gpu_vllm: str, ray_cluster: None, tmp_path: Path):
    import torch
    from standins import build_llama

    from training.config.train import load_train_config
    from training.trainer.run import run_train

    if not torch.cuda.is_available():
        pytest.skip("the learner's environment has no CUDA torch")
    model = build_llama(tmp_path / "llama", head_dim=64)
    cfg = load_train_config(str(REPO / "configs" / "train" / "default.yaml"), [
        f"model={model}", f"output_dir={tmp_path}", "run_name=sleep", "rollout.backend=ray", "rollout.engine=vllm",
        f"rollout.vllm.python={gpu_vllm}", f"rollout.vllm.gpu_memory_utilization={GPU_SHARE}",
        "rollout.vllm.sleep_between_steps=true", "rollout.num_workers=1", "device=cuda", "grpo.max_steps=2",
        "grpo.groups_per_step=1", "grpo.num_generations=2", "rollout.sampling.max_new_tokens=24",
        "rollout.max_rounds=2", "validation.every_steps=0", "checkpoint.save_steps=10", "wandb.mode=disabled"])
    summary = run_train(cfg)
    assert summary["steps"] == 2 and summary["episodes"] == 4
    rows = [json.loads(line) for line in (cfg.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert len([r for r in rows if "train/grad_norm" in r]) == 2
