"""The weight-sync wire format (``training.rollout.sync_wire``): a payload laid out in buckets and unpacked again
comes back bit for bit in its own dtype; tied tensors travel once; engines load the stream in place."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from training.rollout.sync_wire import ALIGN_BYTES, Unpacker, fill_bucket, numpy_payload, plan_layout


def _payload() -> dict:
    g = torch.Generator().manual_seed(0)
    embed = torch.randn(37, 11, generator=g).to(torch.bfloat16)
    return {
        "embed.weight": embed,
        "head.weight": embed,  # tied: the same storage
        "norm.weight": torch.randn(11, generator=g),
        "half.weight": torch.randn(5, 3, generator=g).to(torch.float16),
        "steps": torch.tensor(7, dtype=torch.int64),
        "from_numpy": np.arange(13, dtype=np.float32),
        "__config__": '{"r": 4}',
    }


def _round_trip(state: dict, bucket_bytes: int) -> tuple[dict, object]:
    layout = plan_layout(state, bucket_bytes)
    buffer = torch.empty(layout.bucket_bytes, dtype=torch.uint8)
    unpacker, got = Unpacker(layout), {}
    for index in range(layout.num_buckets):
        for name, tensor in unpacker.take(index, fill_bucket(state, layout, index, buffer).clone()):
            got[name] = tensor.clone()
    return got, layout


@pytest.mark.parametrize("bucket_bytes", [ALIGN_BYTES, 96, 1 << 20])
def test_round_trip_is_bitwise_in_the_source_dtype(bucket_bytes: int) -> None:
    state = _payload()
    got, layout = _round_trip(state, bucket_bytes)
    assert set(got) == {"embed.weight", "norm.weight", "half.weight", "steps", "from_numpy"}
    for name, tensor in got.items():
        source = torch.as_tensor(state[name])
        assert tensor.dtype == source.dtype and tensor.shape == source.shape
        assert torch.equal(tensor, source), name
    assert got["embed.weight"].dtype == torch.bfloat16
    assert layout.aliases == (("head.weight", "embed.weight"),)
    assert layout.extras == (("__config__", '{"r": 4}'),)
    tied_once = 37 * 11 * 2 + 11 * 4 + 15 * 2 + 8 + 13 * 4
    assert layout.payload_bytes == tied_once
    if bucket_bytes == ALIGN_BYTES:  # every tensor of more than one bucket spans buckets
        assert layout.num_buckets == layout.total_bytes // ALIGN_BYTES > 50


def test_bucket_size_is_checked_and_numpy_payload_is_float32() -> None:
    with pytest.raises(ValueError, match="at least 16 bytes"):
        plan_layout(_payload(), 8)
    arrays = numpy_payload(_payload(), copy=True)
    assert arrays["embed.weight"].dtype == np.float32 and arrays["__config__"] == '{"r": 4}'
    assert np.array_equal(arrays["embed.weight"], _payload()["embed.weight"].float().numpy())


def test_policy_loads_a_stream_in_place(policy_tiny_model_dir: Path) -> None:
    from training.rollout.policy import PolicyModel

    policy = PolicyModel(str(policy_tiny_model_dir), device="cpu")
    params = {name: p for name, p in policy.model.named_parameters()}
    before = {name: p.data_ptr() for name, p in params.items()}
    target = {k: v + 0.5 for k, v in policy.model.state_dict().items()}
    got, layout = _round_trip(target, 4096)
    policy.load_stream(iter(got.items()), 3, dict(layout.extras))
    assert policy.weights_version == 3
    for name, tensor in policy.model.state_dict().items():
        assert torch.equal(tensor, target[name]), name
    assert {name: p.data_ptr() for name, p in params.items()} == before  # copied in place
    with pytest.raises(KeyError, match="unexpected weight"):
        policy.load_stream(iter([("nope", torch.zeros(1))]), 4)
    with pytest.raises(KeyError, match="missing weights"):
        policy.load_stream(iter(list(got.items())[:1]), 4)
    assert policy.weights_version == 3


def test_weight_sync_switch_is_checked() -> None:
    from pydantic import ValidationError

    from training.config.model import SamplingConfig
    from training.config.train import TrainConfig
    from training.rollout.contract import RolloutSpec
    from training.rollout.ray_backend import RayBackend, RayPool

    assert TrainConfig().rollout.weight_sync == "collective"
    assert TrainConfig(rollout={"weight_sync": "object_store"}).rollout.weight_sync == "object_store"
    with pytest.raises(ValidationError, match="weight_sync"):
        TrainConfig(rollout={"weight_sync": "nfs"})
    spec = RolloutSpec(model="m", scientist="policy", lab_manager="scripted", sampling=SamplingConfig())
    with pytest.raises(ValueError, match="weight_sync 'nfs'; valid: collective, object_store"):
        RayBackend(spec, RayPool(weight_sync="nfs"))
