"""Opponent pools in every layout training supports: several learner processes (torchrun, gloo), LoRA (the
snapshots are frozen adapters) and the vLLM engine (a snapshot is its own engine).  Each must play the same
opponents as the one-process run and never give a frozen member the live weights.  Slow."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from coin_model import COIN_OVERRIDES
from resume_runs import RESUME_TINY, resume_cut_run
from test_distributed import DDP_WAIT_S, REPO, _env, _torchrun, assert_same_learning

pytestmark = pytest.mark.slow

SELFPLAY_CFG = str(REPO / "configs" / "train" / "selfplay.yaml")
#: The shipped self-play pools (both seats), a snapshot every step: 3 steps of 2 groups x 2 episodes.
POOL_TINY = [*RESUME_TINY, "grpo.groups_per_step=2", "grpo.max_steps=3", "seats.snapshots.every=1",
             "seats.snapshots.keep=2"]


def _drawn(run: Path) -> list[dict]:
    """Each step's pool membership (``pool/*``) as logged."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k.startswith("pool/")} for r in rows if "pool/snapshots_held" in r]


def test_two_learner_processes_play_the_same_opponents_and_learn_what_one_does(policy_wide_model_dir, tmp_path):
    from training.config.train import load_train_config
    from training.trainer.run import run_train

    args = [*POOL_TINY, f"model={policy_wide_model_dir}"]
    one = load_train_config(SELFPLAY_CFG, [*args, f"output_dir={tmp_path / 'one'}", "run_name=pool"])
    run_train(one)
    done = subprocess.run(_torchrun(["--config", SELFPLAY_CFG, *args, f"output_dir={tmp_path / 'two'}",
                                     "run_name=pool"]), cwd=REPO, env=_env(), capture_output=True, text=True,
                          timeout=DDP_WAIT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    two = tmp_path / "two" / "pool"
    assert "learner_processes 2" in done.stdout
    drawn = _drawn(two)
    assert [d["pool/snapshots_held"] for d in drawn] == [1.0, 2.0, 2.0]
    assert drawn == _drawn(one.run_dir)
    assert any(k.endswith("/snapshot") for d in drawn for k in d)  # snapshots were played
    saved = json.loads((two / "checkpoints" / "checkpoint-2" / "opponent_snapshots" / "pool.json").read_text())
    assert saved["steps"] == [0, 1]
    assert_same_learning(two, one.run_dir)


def test_lora_snapshots_are_frozen_adapters_restored_on_resume(policy_coin_model_dir, tmp_path):
    from safetensors.numpy import load_file

    from training.config.train import load_train_config
    from training.trainer.run import run_train

    def config(out: Path):
        return load_train_config(SELFPLAY_CFG, [
            *POOL_TINY, *COIN_OVERRIDES, "lora.enabled=true", "lora.r=4", "grpo.learning_rate=5e-3",
            "grpo.num_generations=4", "rollout.sampling.max_new_tokens=128", f"model={policy_coin_model_dir}",
            f"output_dir={out}", "run_name=lora"])

    whole = config(tmp_path / "whole")
    run_train(whole)
    folder = whole.run_dir / "checkpoints" / "checkpoint-3" / "opponent_snapshots"
    pool = json.loads((folder / "pool.json").read_text())
    assert pool["steps"] == [1, 2] and all("__lora_config__" in pool["extras"][s] for s in ("1", "2"))
    first, second = (load_file(str(folder / f"snapshot-{s}.safetensors")) for s in (1, 2))
    assert first and all("lora_" in k for k in first)  # the adapter only: the base never moves
    # a frozen copy of what step 1 played, not the weights trained after it
    assert any(not np.array_equal(first[k], second[k]) for k in first)
    part = config(tmp_path / "part")
    resume_cut_run(whole.run_dir, part, 3)
    assert _drawn(part.run_dir) == _drawn(whole.run_dir)


@pytest.fixture(scope="module")
def vllm_python() -> str:
    python = REPO / ".venv-vllm" / "bin" / "python"
    if not python.exists():
        pytest.skip("no vLLM environment (bash launch/setup_vllm.sh)")
    return str(python)


def test_a_vllm_snapshot_is_its_own_engine_and_keeps_its_weights(vllm_python, ray_cluster, tmp_path):
    """A snapshot's engine still plays its own weights after the live engine moved on: it plays exactly what a
    snapshot of the same weights loaded afterwards plays, and not what a snapshot of the moved weights plays."""
    import torch
    from standins import build_llama
    from transformers import AutoModelForCausalLM

    from replicalab import TRAIN_SEEDS
    from training.config.model import SamplingConfig
    from training.rollout.contract import RolloutSpec
    from training.rollout.ray_backend import RayBackend, RayPool
    from training.rollout.records import EpisodeJob

    model = build_llama(tmp_path / "llama", head_dim=64)
    spec = RolloutSpec(model=str(model), scientist="policy", lab_manager="policy", max_rounds=2, engine="vllm",
                       sampling=SamplingConfig(max_new_tokens=24, seed=0))
    original = AutoModelForCausalLM.from_pretrained(str(model)).eval().state_dict()
    generator = torch.Generator().manual_seed(1)
    start = {k: v.numpy() for k, v in original.items()}
    moved = {k: (v + 0.05 * torch.randn(v.shape, generator=generator)).numpy() for k, v in original.items()}

    def lab_text(opponent: str) -> list[list[str]]:
        jobs = [EpisodeJob(job_id=i, seed=TRAIN_SEEDS[i // 2], template="cell_biology", difficulty="easy",
                           role="scientist", group=i // 2, opponent=opponent) for i in range(4)]
        records = backend.collect(jobs, sampling_seed=3)
        return [[t.raw_text or "" for t in r.log.turns if t.role == "lab_manager"] for r in records]

    backend = RayBackend(spec, RayPool(num_workers=1, python=vllm_python))
    try:
        backend.set_snapshots({"snapshot:0": start})
        backend.set_weights(moved, 1)
        backend.set_snapshots({"snapshot:0": start, "snapshot:1": start, "snapshot:2": moved})
        kept = lab_text("snapshot:0")
        assert kept == lab_text("snapshot:1") and kept != lab_text("snapshot:2")
    finally:
        backend.close()
