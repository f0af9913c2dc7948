"""The collective weight sync gives the engines BITWISE the learner's weights, in the learner's dtype:
(a) two plain processes over gloo (``torch.multiprocessing`` spawn, the sync group as the learner and a worker
form it), (b) the learner process and a real Ray rollout worker, whose frozen snapshot never receives them.
Slow: processes and Ray."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Iterator

import pytest
import torch

pytestmark = pytest.mark.slow

#: A small bucket so that the embedding (and more) spans several buckets.
TEST_BUCKET_BYTES = 4 << 10
SYNC_TIMEOUT_S = 60.0


def _learner_state(model_dir: Path, dtype: torch.dtype, seed: int) -> dict[str, torch.Tensor]:
    """The tiny checkpoint in ``dtype``, every weight moved by seeded noise (so nothing matches by chance)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=dtype)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g).to(dtype) * 0.1)
    return {k: v.detach() for k, v in model.state_dict().items()}


def _member(rank: int, model_dir: str, port: int, out: str) -> None:
    """One process of test (a): rank 0 sends the learner's bf16 weights, rank 1 loads them into a bf16 policy."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from training.rollout.sync_wire import plan_layout
    from training.rollout.policy import PolicyModel
    from training.rollout.sync_group import GroupAddress, join_group, receive_weights, send_weights

    torch.set_num_threads(1)
    address = GroupAddress("127.0.0.1", port, generation=1, world_size=2, backend="gloo", timeout_s=SYNC_TIMEOUT_S)
    store = torch.distributed.TCPStore("127.0.0.1", port, 2, rank == 0,
                                       timeout=datetime.timedelta(seconds=SYNC_TIMEOUT_S))
    group = join_group(address, rank, store=store)
    state = _learner_state(Path(model_dir), torch.bfloat16, seed=1)
    layout = plan_layout(state, TEST_BUCKET_BYTES)
    if rank == 0:
        send_weights(group, state, layout, torch.device("cpu"))
        torch.save({"state": state, "num_buckets": layout.num_buckets, "aliases": layout.aliases}, out)
        return
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16)
    policy = PolicyModel(model=model, tokenizer=AutoTokenizer.from_pretrained(model_dir), device="cpu")
    policy.load_stream(receive_weights(group, layout, torch.device("cpu")), 1, dict(layout.extras))
    torch.save({k: v.clone() for k, v in policy.model.state_dict().items()}, out)


def _run_member(rank: int, model_dir: str, port: int, outs: list[str]) -> None:
    _member(rank, model_dir, port, outs[rank])


def test_two_processes_over_gloo_bitwise_bf16(policy_tiny_model_dir: Path, tmp_path: Path) -> None:
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    outs = [str(tmp_path / "learner.pt"), str(tmp_path / "worker.pt")]
    mp.spawn(_run_member, args=(str(policy_tiny_model_dir), port, outs), nprocs=2, join=True)
    sent = torch.load(outs[0])
    got = torch.load(outs[1])
    assert sent["num_buckets"] > 3 and sent["aliases"]  # several buckets; the tied head sent once
    assert set(got) == set(sent["state"])
    for name, tensor in sent["state"].items():
        assert got[name].dtype == torch.bfloat16 == tensor.dtype, name
        assert torch.equal(got[name], tensor), name


@pytest.fixture()
def one_worker(ray_cluster: None, policy_tiny_model_dir: Path) -> Iterator:
    from training.config.model import SamplingConfig
    from training.rollout.contract import RolloutSpec
    from training.rollout.ray_backend import RayBackend, RayPool

    spec = RolloutSpec(model=str(policy_tiny_model_dir), scientist="policy", lab_manager="scripted",
                       sampling=SamplingConfig(max_new_tokens=8, seed=0), max_rounds=1)
    backend = RayBackend(spec, RayPool(num_workers=1, sync_bucket_mib=1, sync_timeout_s=SYNC_TIMEOUT_S))
    yield backend
    backend.close()


def test_learner_to_ray_worker_bitwise_and_snapshots_stay_frozen(one_worker, policy_tiny_model_dir: Path) -> None:
    import ray

    from replicalab import DIFFICULTIES, TEMPLATES, TRAIN_SEEDS
    from training.rollout.sync_wire import numpy_payload
    from training.rollout.records import EpisodeJob

    backend, worker = one_worker, one_worker.workers[0]
    start = _learner_state(policy_tiny_model_dir, torch.float32, seed=2)
    backend.set_snapshots({"snapshot:0": numpy_payload(start, copy=True)})
    for version, seed in ((1, 3), (2, 4)):
        live = _learner_state(policy_tiny_model_dir, torch.bfloat16, seed=seed)
        backend.set_weights(live, version)
        layout = backend.sync.last_layout
        assert backend.sync is not None and backend.sync.members == backend.names  # it went over the group
        assert {e.dtype for e in layout.entries} == {"bfloat16"} and layout.aliases  # bf16 on the wire, tied once
        assert layout.payload_bytes == sum(v.numel() * 2 for k, v in live.items() if k != layout.aliases[0][0])
        held = ray.get(worker.state_tensors.remote())
        assert set(held) == set(live)
        for name, tensor in live.items():  # the worker's engine holds float32 on CPU: the bf16 values exactly
            assert torch.equal(held[name], tensor.to(held[name].dtype)), name
        frozen = ray.get(worker.state_tensors.remote("snapshot:0"))
        for name, tensor in start.items():
            assert torch.equal(frozen[name], tensor), name
    job = EpisodeJob(job_id=0, seed=TRAIN_SEEDS[0], template=TEMPLATES[0], difficulty=DIFFICULTIES[0], role="scientist",
                     group=0)
    assert backend.collect([job], sampling_seed=1)[0].weights_version == 2


def test_lora_sends_only_the_adapter_bitwise(one_worker, policy_tiny_model_dir: Path) -> None:
    import ray
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    from training.config.train import TrainConfig
    from training.rollout.policy import LORA_CONFIG_KEY
    from training.trainer.weights import lora_peft_config, policy_weights

    lora = TrainConfig(lora={"enabled": True, "r": 4, "alpha": 8}).lora
    trained = get_peft_model(AutoModelForCausalLM.from_pretrained(str(policy_tiny_model_dir)), lora_peft_config(lora))
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for name, p in trained.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=g))
    payload = policy_weights(trained, lora)
    one_worker.set_weights(payload, 1)
    layout = one_worker.sync.last_layout
    assert one_worker.sync.members == one_worker.names and dict(layout.extras).keys() == {LORA_CONFIG_KEY}
    assert layout.entries and all("lora_" in e.name for e in layout.entries)  # the adapter only
    held = ray.get(one_worker.workers[0].state_tensors.remote())
    for name, tensor in payload.items():
        if name != LORA_CONFIG_KEY:
            theirs = held[name.replace(".lora_A.", ".lora_A.default.").replace(".lora_B.", ".lora_B.default.")]
            assert torch.equal(theirs, tensor), name
