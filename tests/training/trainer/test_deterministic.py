"""``deterministic: true`` switches on PyTorch's deterministic algorithms for the run (transformers'
``enable_full_determinism``) and trains what the default trains on CPU, where both are deterministic.  Slow."""

from __future__ import annotations

import os

import pytest
import torch
from resume_runs import TRAIN_CFG, assert_same_run, reference_run, resume_overrides  # noqa: F401 -- reference_run is a fixture

pytestmark = pytest.mark.slow

#: What enable_full_determinism sets for the process; restored after the test.
DETERMINISM_ENV = ("CUDA_LAUNCH_BLOCKING", "CUBLAS_WORKSPACE_CONFIG", "ASCEND_LAUNCH_BLOCKING", "HCCL_DETERMINISTIC",
                   "FLASH_ATTENTION_DETERMINISTIC")


@pytest.fixture
def process_determinism(monkeypatch):
    """Leave the process as it was: the environment and torch's deterministic flags."""
    for name in DETERMINISM_ENV:
        if name in os.environ:
            monkeypatch.setenv(name, os.environ[name])
        else:
            monkeypatch.delenv(name, raising=False)
    before = torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark
    yield
    torch.use_deterministic_algorithms(before[0])
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = before[1], before[2]


def test_a_deterministic_run_trains_what_the_default_trains_on_cpu(policy_wide_model_dir, reference_run, tmp_path,
                                                                   process_determinism):
    from training.config.train import load_train_config
    from training.trainer.run import run_train

    seen = []
    cfg = load_train_config(TRAIN_CFG, [*resume_overrides(policy_wide_model_dir, tmp_path, "ref"), "deterministic=true"])
    run_train(cfg, observe=lambda step, row: seen.append(torch.are_deterministic_algorithms_enabled()))
    assert seen and all(seen)
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"
    assert_same_run(cfg.run_dir, reference_run)
