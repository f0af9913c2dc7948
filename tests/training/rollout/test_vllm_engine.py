"""``rollout.engine=vllm``: vLLM engines in the Ray rollout workers, running in the vLLM environment
(``launch/setup_vllm.sh``; the slow tests skip without it).  The engine must sample exactly what the trainer
scores, reload the learner's weights in place every step, and repeat itself given the same seeds."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[3]
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
#: Most |trainer - rollout| log-prob (nats) on any model token: float32 rounding, no more.
EXACT_NATS = 1e-4


# -- configuration and the environment check (fast) ----------------------------------------------------
def test_the_vllm_engine_needs_ray_workers_and_full_weights():
    from pydantic import ValidationError

    from training.config.train import TrainConfig

    with pytest.raises(ValidationError, match="rollout.engine=vllm runs in Ray rollout workers"):
        TrainConfig.model_validate({"rollout": {"engine": "vllm", "backend": "inprocess"}})
    with pytest.raises(ValidationError, match="lora.enabled=true with rollout.engine=vllm"):
        TrainConfig.model_validate({"rollout": {"engine": "vllm"}, "lora": {"enabled": True}})
    assert TrainConfig.model_validate({"rollout": {"engine": "vllm"}}).rollout.vllm.gpu_memory_utilization == 0.5


def test_a_missing_or_vllm_less_environment_is_one_line(tmp_path: Path):
    from training.errors import UserInputError
    from training.rollout.engines import check_vllm_python

    with pytest.raises(UserInputError, match=r"no Python at .*; run bash launch/setup_vllm.sh"):
        check_vllm_python(str(tmp_path / "nothing" / "python"))
    # this (the learner's) environment has Ray but no vLLM
    with pytest.raises(UserInputError, match=r"cannot import vLLM and this project \(.*vllm.*\); run bash") as err:
        check_vllm_python(sys.executable)
    assert "\n" not in str(err.value)


def test_the_rollout_correction_reweights_by_the_truncated_token_ratio():
    import torch

    from training.trainer.grpo_maths import mismatch_metrics, mismatch_sums, rollout_correction

    trainer = torch.tensor([[-1.0, -2.0, -0.5], [-1.0, -1.0, -1.0], [-3.0, -0.1, -0.2]])
    rollout = torch.tensor([[-1.0, -2.0, -0.5], [-1.2, -1.1, -9.0], [-0.1, -0.1, -0.2]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 1, 1]])  # the last token of row 2 is the environment's
    ratio = rollout_correction(rollout, trainer, mask, clip=2.0)
    want = [[1.0, 1.0, 1.0], [float(np.exp(0.2)), float(np.exp(0.1)), 1.0], [float(np.exp(-2.9)), 1.0, 1.0]]
    assert ratio.tolist() == [pytest.approx(row) for row in want]
    truncated = rollout_correction(rollout, trainer + 2.0, mask, clip=2.0).tolist()
    assert truncated == [[2.0, 2.0, 2.0], [2.0, 2.0, 1.0], [pytest.approx(np.exp(-0.9)), 2.0, 2.0]]  # env tokens: 1
    roles = ["scientist", "scientist", "lab_manager"]
    per_process = [mismatch_sums(rollout[:2], trainer[:2], mask[:2], roles[:2]),
                   mismatch_sums(rollout[2:], trainer[2:], mask[2:], roles[2:])]
    metrics = mismatch_metrics(per_process)
    assert metrics["mismatch/scientist/abs_diff"] == pytest.approx(0.3 / 5)  # token-weighted over processes
    assert metrics["mismatch/lab_manager/abs_diff"] == pytest.approx(2.9 / 3)


# -- the engine in Ray workers (slow) -----------------------------------------------------------------
@pytest.fixture(scope="module")
def vllm_python() -> str:
    if not VLLM_PYTHON.exists():
        pytest.skip("no vLLM environment (bash launch/setup_vllm.sh)")
    return str(VLLM_PYTHON)


@pytest.fixture(scope="module")
def llama_standin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A user's Llama-family model (no pad token, its own chat template and sampling extras) with 64-wide
    heads, a size vLLM's CPU attention runs."""
    from standins import build_llama

    return build_llama(tmp_path_factory.mktemp("llama-vllm"), head_dim=64)


def _jobs(n: int = 4) -> list:
    from replicalab import TRAIN_SEEDS
    from training.rollout.records import EpisodeJob

    return [EpisodeJob(job_id=i, seed=TRAIN_SEEDS[i // 2], template="cell_biology", difficulty="easy",
                       role="scientist", group=i // 2) for i in range(n)]


@pytest.mark.slow
def test_vllm_workers_sample_what_the_trainer_scores_and_reload_weights(vllm_python: str, ray_cluster: None,
                                                                        llama_standin: Path):
    import torch
    from transformers import AutoModelForCausalLM

    from training.bench.engines import mismatch
    from training.config.model import SamplingConfig
    from training.rollout.contract import RolloutSpec
    from training.rollout.ray_backend import RayBackend, RayPool

    spec = RolloutSpec(model=str(llama_standin), scientist="policy", lab_manager="scripted",
                       sampling=SamplingConfig(max_new_tokens=24, seed=0), max_rounds=2, engine="vllm")
    backend = RayBackend(spec, RayPool(python=vllm_python))
    try:
        jobs = _jobs()
        first = backend.collect(jobs, sampling_seed=3)
        again = backend.collect(jobs, sampling_seed=3)
        for a, b in zip(first, again):  # same seeds, same episodes (the second read its prompts from the cache)
            assert (a.trajectory.prompt_ids, a.trajectory.completion_ids) == (b.trajectory.prompt_ids,
                                                                              b.trajectory.completion_ids)
            assert np.allclose(a.trajectory.logprobs, b.trajectory.logprobs, atol=EXACT_NATS)
        original = AutoModelForCausalLM.from_pretrained(str(llama_standin)).eval()
        _, worst, scored = mismatch(first, original, 1.0)
        assert scored > 40 and worst < EXACT_NATS

        generator = torch.Generator().manual_seed(1)
        moved = {k: v + 0.05 * torch.randn(v.shape, generator=generator) for k, v in original.state_dict().items()}
        backend.set_weights({k: v.numpy() for k, v in moved.items()}, 1)
        after = backend.collect(jobs, sampling_seed=3)
        assert all(r.weights_version == 1 for r in after)
        trained = AutoModelForCausalLM.from_pretrained(str(llama_standin)).eval()
        trained.load_state_dict(moved)
        assert mismatch(after, trained, 1.0)[1] < EXACT_NATS  # the engine plays the new weights...
        assert mismatch(after, original, 1.0)[0] > 100 * EXACT_NATS  # ...not the ones it loaded from disk
    finally:
        backend.close()


@pytest.mark.slow
def test_training_with_the_vllm_engine(vllm_python: str, ray_cluster: None, llama_standin: Path, tmp_path: Path):
    import json

    from training.config.train import load_train_config
    from training.trainer.run import run_train

    cfg = load_train_config(str(REPO / "configs" / "train" / "default.yaml"), [
        f"model={llama_standin}", f"output_dir={tmp_path}", "run_name=vllm", "rollout.backend=ray",
        "rollout.engine=vllm", f"rollout.vllm.python={vllm_python}", "rollout.num_workers=1", "device=cpu",
        "grpo.max_steps=2", "grpo.groups_per_step=2", "grpo.num_generations=2", "grpo.learning_rate=0.01",
        "rollout.sampling.max_new_tokens=24", "rollout.max_rounds=2", "validation.every_steps=0",
        "checkpoint.save_steps=10", "wandb.mode=disabled"])
    summary = run_train(cfg)
    assert summary["steps"] == 2 and summary["episodes"] == 8
    rows = [json.loads(line) for line in (cfg.run_dir / "metrics.jsonl").read_text().splitlines()]
    gaps = [r["mismatch/scientist/abs_diff"] for r in rows if "mismatch/scientist/abs_diff" in r]
    assert len(gaps) == 2 and max(gaps) < EXACT_NATS, gaps  # step 1 plays weights the learner just changed
    weights = [r["rollout_correction/mean"] for r in rows if "rollout_correction/mean" in r]
    assert len(weights) == 2 and all(abs(w - 1.0) < 1e-2 for w in weights), weights  # exact: nothing to correct
    changed = [r["train/grad_norm"] for r in rows if "train/grad_norm" in r]
    assert len(changed) == 2
    assert np.isfinite(changed).all()


@pytest.mark.slow
def test_eval_with_the_vllm_engine(vllm_python: str, ray_cluster: None, llama_standin: Path, tmp_path: Path):
    from training.config.eval import load_eval_config
    from training.eval.run import run_eval

    cfg = load_eval_config(None, [f"agents=[model:{llama_standin}]", "episodes=2", "templates=[cell_biology]",
                                  "difficulties=[easy]", "backend=ray", "num_workers=1", "engine=vllm",
                                  f"vllm.python={vllm_python}", "sampling.max_new_tokens=24", "max_rounds=2",
                                  f"out={tmp_path / 'eval'}", "wandb.mode=disabled"])
    report = run_eval(cfg, progress=False)
    assert report["agents"][f"model:{llama_standin}"]["overall"]["episodes"] == 2
