"""A rollout worker's ready timeout: configured (``rollout.ready_timeout_s``) or grown with the policy's weights."""

import pytest
from pydantic import ValidationError

from training.config.train import load_train_config
from training.rollout.ready import READY_BASE_S, READY_S_PER_GIB, ready_timeout_s


def test_default_grows_with_the_weight_files_and_a_configured_value_wins(tmp_path):
    assert ready_timeout_s(tmp_path / "missing") == READY_BASE_S
    with open(tmp_path / "model-00001-of-00002.safetensors", "wb") as f:
        f.truncate(10 * 2**30)  # sparse: 10 GiB on paper
    (tmp_path / "config.json").write_text("{}")
    assert ready_timeout_s(tmp_path) == pytest.approx(READY_BASE_S + 10 * READY_S_PER_GIB)
    assert ready_timeout_s(tmp_path, 45.0) == 45.0
    assert load_train_config(None, ["rollout.ready_timeout_s=900"]).rollout.ready_timeout_s == 900.0
    with pytest.raises(ValidationError):
        load_train_config(None, ["rollout.ready_timeout_s=0"])
