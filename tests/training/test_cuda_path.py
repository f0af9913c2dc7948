"""The GPU path with torch and transformers only (no Ray, vLLM or W&B): GRPO steps on CUDA in-process with weights
that change, a resume from a CUDA checkpoint, new weights loaded into a CUDA policy, and the planner's memory
estimate as an upper bound on what a training step allocates.  Marked ``gpu``; skipped without CUDA
(``launch/gpu_check.sh figures`` runs them on a GPU node)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from coin_model import COIN_OVERRIDES
from resume_runs import RESUME_TINY, TRAIN_CFG, comparable_rows, resume_cut_run, resume_from_cut, weights

pytestmark = [pytest.mark.gpu, pytest.mark.slow,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

#: A few in-process CUDA steps of the coin model (rewards vary, so gradients are real); no W&B.
CUDA_TINY = [*RESUME_TINY, *COIN_OVERRIDES, "device=cuda", "grpo.max_steps=3", "grpo.num_generations=4",
             "grpo.learning_rate=5e-3", "rollout.sampling.max_new_tokens=64"]
#: Relative tolerance of a CUDA resume's logged rewards: cuBLAS may pick other kernels after a restart, so a
#: resumed step can sample another token where two are nearly tied; the weights it ends with stay close.
RESUME_RTOL = 0.25


def _cfg(model: Path, out: Path, name: str, *extra: str):
    from training.config.train import load_train_config

    return load_train_config(TRAIN_CFG, [*CUDA_TINY, f"model={model}", f"output_dir={out}", f"run_name={name}",
                                         *extra])


@pytest.fixture(scope="module")
def cuda_run(policy_coin_model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """One 3-step CUDA run (a checkpoint every step) and the peak memory it allocated and reserved, GiB."""
    from training.trainer.run import run_train

    torch.cuda.reset_peak_memory_stats()
    cfg = _cfg(policy_coin_model_dir, tmp_path_factory.mktemp("cuda"), "cuda")
    assert run_train(cfg)["steps"] == 3
    return cfg, (torch.cuda.max_memory_allocated() / 2**30, torch.cuda.max_memory_reserved() / 2**30)


def test_grpo_on_cuda_changes_every_trained_weight_and_keeps_them_finite(cuda_run, policy_coin_model_dir):
    from safetensors.torch import load_file

    cfg, _ = cuda_run
    before = load_file(str(policy_coin_model_dir / "model.safetensors"))
    after = weights(cfg.run_dir)
    assert all(torch.isfinite(t).all() for t in after.values())
    assert any(not torch.equal(after[k].float(), before[k].float()) for k in before if k in after)


def test_a_cuda_run_resumes_from_its_checkpoint(cuda_run, tmp_path):
    cfg, _ = cuda_run
    part = _cfg(Path(cfg.model), tmp_path, "cuda")
    resume_from_cut(cfg.run_dir, part, 3)
    got, want = (comparable_rows(run / "metrics.jsonl") for run in (part.run_dir, cfg.run_dir))
    rewards = [(r["step"], r["reward/mean"]) for r in want if "reward/mean" in r]
    resumed = [(r["step"], r["reward/mean"]) for r in got if "reward/mean" in r]
    assert [s for s, _ in resumed] == [s for s, _ in rewards]
    for (_, a), (_, b) in zip(resumed, rewards):
        assert a == pytest.approx(b, rel=RESUME_RTOL, abs=RESUME_RTOL)


def test_a_deterministic_cuda_run_resumes_bitwise(policy_coin_model_dir, tmp_path, process_determinism):
    """``deterministic: true``: the resumed run logs what the whole run logged and ends with the same weights."""
    from training.trainer.run import run_train

    whole = _cfg(policy_coin_model_dir, tmp_path / "whole", "det", "deterministic=true")
    run_train(whole)
    part = _cfg(policy_coin_model_dir, tmp_path / "part", "det", "deterministic=true")
    resume_cut_run(whole.run_dir, part, 3)
    got, want = weights(part.run_dir), weights(whole.run_dir)
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in got), "final weights differ"


def test_new_weights_load_into_a_cuda_policy(policy_coin_model_dir):
    from training.rollout.policy import PolicyModel

    policy = PolicyModel(str(policy_coin_model_dir), device="cuda")
    state = {k: v * 0.5 for k, v in policy.state_numpy().items()}
    policy.load_state(state, version=7)
    assert policy.weights_version == 7
    loaded = policy.model.state_dict()
    assert all(torch.equal(loaded[k].float().cpu(), torch.from_numpy(v).to(loaded[k].dtype).float())
               for k, v in state.items() if k in loaded)


def test_the_planner_estimate_bounds_what_a_cuda_step_allocates(cuda_run):
    """What the tensors took and what the caching allocator reserved, both under the estimate (its CUDA overhead
    holds cuBLAS's workspaces, which are allocations)."""
    from training.cluster.memory import CUDA_OVERHEAD_GIB
    from training.cluster.preflight import preflight
    from training.cluster.resources import ClusterResources

    cfg, (allocated, reserved) = cuda_run
    total_gib = torch.cuda.get_device_properties(0).total_memory / 2**30
    plan = preflight(cfg, ClusterResources(gpus=1, gpu_memory_gib=total_gib), log=False)
    estimate = sum(load.memory_gib or 0.0 for load in plan.gpu_loads)
    assert estimate > CUDA_OVERHEAD_GIB, "the plan estimated no GPU memory for a CUDA run"
    assert allocated <= estimate, f"allocated {allocated:.3f} GiB, estimated {estimate:.3f} GiB"
    assert reserved <= estimate, f"reserved {reserved:.3f} GiB, estimated {estimate:.3f} GiB"
