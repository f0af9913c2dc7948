"""``deterministic: true`` switches on PyTorch's deterministic algorithms for the run (transformers'
``enable_full_determinism``) and trains what the default trains on CPU, where both are deterministic.  Slow."""

from __future__ import annotations

import os

import pytest
import torch
from resume_runs import (  # noqa: F401 -- reference_run is a fixture
    TRAIN_CFG,
    assert_same_run,
    reference_run,
    resume_overrides,
)

pytestmark = pytest.mark.slow


def test_a_deterministic_run_trains_what_the_default_trains_on_cpu(policy_wide_model_dir, reference_run, tmp_path,
                                                                   process_determinism):
    from training.config.train import load_train_config
    from training.trainer.run import run_train

    seen = []
    overrides = [*resume_overrides(policy_wide_model_dir, tmp_path, "ref"), "deterministic=true"]
    cfg = load_train_config(TRAIN_CFG, overrides)
    run_train(cfg, observe=lambda step, row: seen.append(torch.are_deterministic_algorithms_enabled()))
    assert seen and all(seen)
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"
    assert_same_run(cfg.run_dir, reference_run)
