"""The planner counts the learner's real dtype (``dtype``: float32 weights and gradients for full fine-tuning, a
bfloat16 base for LoRA on cuda, fp32 Adam either way), refuses vLLM engines whose ``gpu_memory_utilization``
over-books a GPU they share, and refuses rollout workers of several GPUs (no tensor parallelism)."""

import pytest

from training.cluster.memory import ADAM_STATE_BYTES, GIB, LORA_TRAINABLE_FRACTION
from training.cluster.plan import plan_placement
from training.cluster.plan_table import render_plan
from training.cluster.resources import ClusterResources
from training.config.train import load_train_config
from training.errors import UserInputError

PARAMS = 7_615_616_512  # Qwen2.5-7B
CLUSTER = ClusterResources(gpus=8)  # memory not checked: these tests read the estimates
SNAPSHOT_POOL = "seats.pools={lab_manager: [{seat: policy, weight: 1}, {seat: snapshot, weight: 1}]}"


def plan(*overrides: str, lora: bool = False, cluster: ClusterResources = CLUSTER):
    cfg = load_train_config(None, ["device=cuda", "rollout.num_workers=2", "grpo.gradient_accumulation_steps=32",
                                   "grpo.gradient_checkpointing=true", *overrides])
    return plan_placement(cfg, cluster, param_count=PARAMS, dtype_bytes=2, lora=lora or cfg.lora.enabled)


def test_learner_weights_and_gradients_at_the_learner_dtype():
    full = plan().learners[0].memory
    assert full.weights == pytest.approx(PARAMS * 4 / GIB) and full.gradients == pytest.approx(PARAMS * 4 / GIB)
    assert full.optimizer == pytest.approx(PARAMS * ADAM_STATE_BYTES / GIB)
    lora = plan(lora=True).learners[0].memory  # a bfloat16 base, fp32 adapters
    adapters = PARAMS * LORA_TRAINABLE_FRACTION
    assert lora.weights == pytest.approx((PARAMS * 2 + adapters * 4) / GIB)
    assert lora.optimizer == pytest.approx(adapters * ADAM_STATE_BYTES / GIB)
    fp32_lora = plan("lora.enabled=true", "dtype=float32").learners[0].memory
    assert fp32_lora.weights == pytest.approx((PARAMS * 4 + adapters * 4) / GIB)
    header = render_plan(plan()).splitlines()[0]
    assert "4-byte learner weights, 2-byte rollout weights" in header
    assert "2-byte weights" in render_plan(plan(lora=True)).splitlines()[0]
    assert plan().workers[0].memory.weights == pytest.approx(PARAMS * 2 / GIB)  # workers hold bfloat16


def test_vllm_engines_sharing_a_gpu_may_not_book_more_than_all_of_it():
    vllm = ["rollout.engine=vllm", "rollout.num_workers=4", "placement.gpus_per_worker=0.25"]
    with pytest.raises(UserInputError) as err:
        plan(*vllm, "rollout.vllm.gpu_memory_utilization=0.5")
    text = str(err.value)
    assert "\n" not in text and "4 engines x rollout.vllm.gpu_memory_utilization 0.5 = 2" in text
    assert "rollout.vllm.gpu_memory_utilization=0.25" in text
    assert len(plan(*vllm, "rollout.vllm.gpu_memory_utilization=0.25").workers) == 4
    assert len(plan("rollout.engine=vllm", "placement.gpus_per_worker=0.5").workers) == 2  # 2 x 0.5 = 1
    assert len(plan(*vllm, "rollout.vllm.gpu_memory_utilization=0.5", "rollout.engine=hf").workers) == 4
    # each snapshot of the policy is one more engine in every worker
    with pytest.raises(UserInputError, match=r"3 engines each.*6 engines x .* 0.25 = 1.5"):
        plan("rollout.engine=vllm", "placement.gpus_per_worker=0.5", "rollout.vllm.gpu_memory_utilization=0.25",
             "seats.lab_manager=policy", SNAPSHOT_POOL, "seats.snapshots.keep=2", "seats.snapshots.every=8")


def test_a_worker_of_several_gpus_is_refused():
    with pytest.raises(UserInputError) as err:
        plan("placement.gpus_per_worker=2")
    assert "no tensor parallelism" in str(err.value) and "placement.gpus_per_worker=1" in str(err.value)
