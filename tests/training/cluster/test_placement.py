"""Placement planning: the plan for 1, 2, 8 and 16 GPUs (1.5B and 7B models, full and LoRA), refusals of
impossible layouts in one line, the model-shape reader and the pre-flight command (a real Ray reserving the plan:
``test_placement_ray.py``)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from training.cli import main
from training.cluster.memory import GIB, LORA_TRAINABLE_FRACTION, ModelShape, read_model_shape
from training.cluster.plan import PlacementPlan, plan_placement
from training.cluster.preflight import preflight
from training.cluster.plan_table import render_plan
from training.cluster.resources import ClusterResources, NodeResources
from training.config.placement import PlacementConfig
from training.config.train import TrainConfig, load_train_config
from training.errors import UserInputError

#: Published configs (config.json keys) of Qwen2.5-1.5B/7B-Instruct and their parameter counts.
QWEN_CONFIGS: dict[str, dict[str, Any]] = {
    "1.5b": dict(model_type="qwen2", hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                 num_attention_heads=12, num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True,
                 torch_dtype="bfloat16"),
    "7b": dict(model_type="qwen2", hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
               num_attention_heads=28, num_key_value_heads=4, vocab_size=152064, tie_word_embeddings=False,
               torch_dtype="bfloat16"),
}
QWEN_PARAMS = {"1.5b": 1_543_714_304, "7b": 7_615_616_512}
H100_GIB = 80.0


@pytest.fixture(scope="module")
def qwen_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A directory holding only a config.json per model (all the planner reads)."""
    dirs = {}
    for name, config in QWEN_CONFIGS.items():
        folder = tmp_path_factory.mktemp(f"qwen-{name}")
        (folder / "config.json").write_text(json.dumps(config))
        dirs[name] = folder
    return dirs


def plan_for(overrides: list[str], cluster: ClusterResources, model: str = "7b", *, lora: bool = False,
             processes: int = 1, sharded: bool = False) -> PlacementPlan:
    cfg = load_train_config(None, ["device=cuda", *overrides])
    shape = ModelShape.from_config(QWEN_CONFIGS[model])
    return plan_placement(cfg, cluster, param_count=shape.params, dtype_bytes=2, lora=lora,
                          learner_processes=processes, sharded=sharded, shape=shape)


def check_invariants(plan: PlacementPlan, cfg_workers: int) -> None:
    """No GPU over-subscribed or over its memory, learners on GPUs 0..k-1 of node 0, workers off them."""
    for load in plan.gpu_loads:
        assert load.reserved <= 1.0 + 1e-9, load
        if load.memory_gib is not None and plan.cluster.gpu_memory_gib:
            assert load.memory_gib <= plan.cluster.gpu_memory_gib, load
    assert [q.gpus for q in plan.learners] == [(r,) for r in range(plan.trainer_gpus)] or not plan.trainer_gpus
    assert all(q.node == 0 for q in plan.learners)
    learner_gpus = {(0, d) for q in plan.learners for d in q.gpus}
    assert all((w.node, d) not in learner_gpus for w in plan.workers for d in w.gpus)
    if plan.backend == "ray":
        assert len(plan.workers) == cfg_workers
    rendered = render_plan(plan)
    for q in (*plan.learners, *plan.workers):
        assert q.name in rendered
    print("\n" + rendered)


# name -> (overrides, cluster, model, lora, learner processes, sharded, expected {process: (node, gpus)})
LAYOUTS: dict[str, tuple] = {
    "1gpu-1.5b-full-inprocess": (
        ["rollout.backend=inprocess", "grpo.gradient_accumulation_steps=8", "grpo.gradient_checkpointing=true"],
        ClusterResources(gpus=1, gpu_memory_gib=H100_GIB), "1.5b", False, 1, False,
        {"learner rank 0": (0, (0,))}),
    "1gpu-1.5b-lora-cpu-workers": (
        ["rollout.num_workers=2", "placement.gpus_per_worker=0", "grpo.gradient_accumulation_steps=8"],
        ClusterResources(gpus=1, gpu_memory_gib=H100_GIB, cpus=16), "1.5b", True, 1, False,
        {"learner rank 0": (0, (0,)), "rollout-0": (0, ()), "rollout-1": (0, ())}),
    "2gpu-1.5b-full": (
        ["rollout.num_workers=2", "grpo.gradient_accumulation_steps=8", "grpo.gradient_checkpointing=true"],
        ClusterResources(gpus=2, gpu_memory_gib=H100_GIB), "1.5b", False, 1, False,
        {"learner rank 0": (0, (0,)), "rollout-0": (0, (1,)), "rollout-1": (0, (1,))}),
    "2gpu-7b-lora": (
        ["rollout.num_workers=1", "grpo.gradient_accumulation_steps=8", "grpo.gradient_checkpointing=true"],
        ClusterResources(gpus=2, gpu_memory_gib=H100_GIB), "7b", True, 1, False,
        {"learner rank 0": (0, (0,)), "rollout-0": (0, (1,))}),
    "8gpu-7b-lora": (
        ["rollout.num_workers=7", "grpo.gradient_accumulation_steps=8", "grpo.gradient_checkpointing=true"],
        ClusterResources(gpus=8, gpu_memory_gib=H100_GIB, cpus=64), "7b", True, 1, False,
        {"learner rank 0": (0, (0,)), **{f"rollout-{i}": (0, (i + 1,)) for i in range(7)}}),
    "8gpu-7b-full-fsdp4": (
        ["rollout.num_workers=4", "placement.trainer_gpus=4", "grpo.gradient_accumulation_steps=2",
         "grpo.gradient_checkpointing=true"],
        ClusterResources(gpus=8, gpu_memory_gib=H100_GIB, cpus=64), "7b", False, 4, True,
        {**{f"learner rank {r}": (0, (r,)) for r in range(4)}, **{f"rollout-{i}": (0, (4 + i,)) for i in range(4)}}),
    "16gpu-2node-7b-full-fsdp8": (
        ["rollout.num_workers=8", "placement.trainer_gpus=8", "grpo.gradient_checkpointing=true"],
        ClusterResources(gpus=16, nodes=2, gpu_memory_gib=H100_GIB, cpus=128), "7b", False, 8, True,
        {**{f"learner rank {r}": (0, (r,)) for r in range(8)}, **{f"rollout-{i}": (1, (i,)) for i in range(8)}}),
    "16gpu-2node-7b-lora-spread": (
        ["rollout.num_workers=15", "placement.strategy=SPREAD", "grpo.gradient_accumulation_steps=8",
         "grpo.gradient_checkpointing=true"],
        ClusterResources(gpus=16, nodes=2, gpu_memory_gib=H100_GIB, cpus=128), "7b", True, 1, False,
        {"learner rank 0": (0, (0,)), "rollout-0": (1, (0,)), "rollout-1": (0, (1,)), "rollout-14": (1, (7,))}),
    "16gpu-2node-1.5b-half-gpu-workers": (
        ["rollout.num_workers=30", "placement.cpus_per_worker=1", "grpo.gradient_accumulation_steps=8",
         "grpo.gradient_checkpointing=true"],
        ClusterResources(gpus=16, nodes=2, gpu_memory_gib=H100_GIB, cpus=64), "1.5b", False, 1, False,
        {"learner rank 0": (0, (0,)), "rollout-0": (0, (1,)), "rollout-1": (0, (1,)), "rollout-13": (0, (7,)),
         "rollout-14": (1, (0,)), "rollout-29": (1, (7,))}),
}


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_plan_layouts(name: str) -> None:
    overrides, cluster, model, lora, processes, sharded, expected = LAYOUTS[name]
    plan = plan_for(overrides, cluster, model, lora=lora, processes=processes, sharded=sharded)
    workers = next((int(o.split("=")[1]) for o in overrides if o.startswith("rollout.num_workers=")), 2)
    check_invariants(plan, workers)
    where = {q.name: (q.node, q.gpus) for q in (*plan.learners, *plan.workers)}
    for process, spot in expected.items():
        assert where[process] == spot, (process, where[process], spot)
    assert plan.trainer_gpus == processes
    used = sum(load.reserved for load in plan.gpu_loads)
    assert used == pytest.approx(processes + len(plan.workers) * plan.gpus_per_worker)


def test_memory_estimates_in_range() -> None:
    """Weights, optimizer and adapter parts follow the parameter count; sharding divides; LoRA is small."""
    params7 = QWEN_PARAMS["7b"]
    full = plan_for(*LAYOUTS["8gpu-7b-full-fsdp4"][:1], LAYOUTS["8gpu-7b-full-fsdp4"][1], processes=4, sharded=True)
    rank0 = full.learners[0].memory
    assert full.weights_gib == pytest.approx(params7 * 2 / GIB) and 14.0 < full.weights_gib < 14.5
    # the learner's weights and gradients are float32 (dtype auto, full fine-tuning), the workers' bfloat16
    assert rank0.weights == pytest.approx(params7 * 4 / GIB / 4) and full.learner_dtype_bytes == 4
    assert rank0.optimizer == pytest.approx(params7 * 8 / GIB / 4)  # Adam: two fp32 moments, sharded 4 ways
    assert rank0.gradients == pytest.approx(params7 * 4 / GIB / 4)
    worker = full.workers[0].memory
    assert worker.weights == pytest.approx(full.weights_gib) and 0 < worker.kv_cache < worker.weights
    assert 15 < worker.total < 40 and 25 < rank0.total < 60

    lora = plan_for(*LAYOUTS["8gpu-7b-lora"][:2], lora=True)
    learner = lora.learners[0].memory
    adapters = params7 * LORA_TRAINABLE_FRACTION
    assert learner.optimizer == pytest.approx(adapters * 8 / GIB) and learner.optimizer < 1.0
    assert learner.reference == 0.0 and learner.weights == pytest.approx(lora.weights_gib + adapters * 4 / GIB)
    assert lora.object_store_gib == pytest.approx(adapters * 4 / GIB)
    assert full.object_store_gib == pytest.approx(params7 * 4 / GIB)  # float32 weights per broadcast

    # a reference copy only for full fine-tuning with a KL term
    beta = plan_for(["rollout.num_workers=4", "placement.trainer_gpus=4", "grpo.beta=0.04",
                     "grpo.gradient_accumulation_steps=2", "grpo.gradient_checkpointing=true"],
                    ClusterResources(gpus=8, gpu_memory_gib=H100_GIB), processes=4, sharded=True)
    assert beta.learners[0].memory.reference == pytest.approx(rank0.weights)
    # more episodes per micro-batch -> more activation memory; fewer workers -> more KV cache each
    bigger = plan_for(["rollout.num_workers=4", "placement.trainer_gpus=4", "grpo.gradient_checkpointing=true"],
                      ClusterResources(gpus=8), processes=4, sharded=True)
    assert bigger.learners[0].memory.activations > rank0.activations
    fewer = plan_for(["rollout.num_workers=1", "placement.trainer_gpus=4"], ClusterResources(gpus=8),
                     processes=4, sharded=True)
    assert fewer.workers[0].memory.kv_cache == pytest.approx(4 * worker.kv_cache)


def test_unknown_size_plans_gpus_without_memory() -> None:
    cfg = load_train_config(None, ["device=cuda", "rollout.num_workers=3"])
    plan = plan_placement(cfg, ClusterResources(gpus=4, gpu_memory_gib=H100_GIB), param_count=None, dtype_bytes=2)
    assert [w.gpus for w in plan.workers] == [(1,), (2,), (3,)] and plan.workers[0].memory is None
    assert "memory not estimated" in render_plan(plan)
    sized = plan_placement(load_train_config(None, ["device=cuda", "rollout.num_workers=3",
                                                    "placement.model_memory_gib=10"]),
                           ClusterResources(gpus=4), param_count=None, dtype_bytes=2)
    assert sized.workers[0].memory.weights == 10.0


def test_cpu_run_holds_no_gpu() -> None:
    plan = plan_placement(TrainConfig(device="cpu"), ClusterResources(gpus=0, cpus=2), param_count=2_000_000,
                          dtype_bytes=4)
    assert plan.trainer_gpus == 0 and plan.gpus_per_worker == 0 and plan.worker_device == "cpu"
    assert plan.trainer_bundle() is None and plan.worker_bundle() == {"CPU": 1.0}
    assert all(not w.gpus for w in plan.workers) and len(plan.workers) == 2


# (overrides, cluster, learner processes, lora, substrings the one line must hold)
REFUSALS: list[tuple] = [
    (["rollout.num_workers=4", "placement.gpus_per_worker=1"], ClusterResources(gpus=4), 1, False,
     ["4 rollout workers x 1 GPU + 1 trainer GPU(s) = 5 GPUs, the cluster has 4",
      "rollout.num_workers=3", "placement.gpus_per_worker=0.5"]),
    (["rollout.num_workers=8", "placement.gpus_per_worker=0.75"], ClusterResources(gpus=8), 1, False,
     ["8 rollout workers x 0.75 GPU (1 per GPU: 8 GPUs) + 1 trainer GPU(s) = 9 GPUs, the cluster has 8",
      "rollout.num_workers=7"]),
    (["rollout.num_workers=2"], ClusterResources(gpus=1), 1, False,
     ["the learner's 1 GPU(s) are all the cluster has", "rollout.backend=inprocess"]),
    ([], ClusterResources(gpus=0, cpus=8), 1, False, ["device=cuda but the learner holds no GPU"]),
    (["placement.trainer_gpus=2"], ClusterResources(gpus=8), 1, False,
     ["placement.trainer_gpus=2 but the learner runs 1 process(es)", "torchrun --nproc_per_node 2"]),
    (["rollout.num_workers=4", "placement.strategy=STRICT_SPREAD"], ClusterResources(gpus=16, nodes=2), 1, False,
     ["rollout worker 1 (1 GPU, 1 CPUs) does not fit under placement.strategy=STRICT_SPREAD on 2 node(s)",
      "set placement.strategy=PACK"]),
    (["rollout.num_workers=7", "placement.cpus_per_worker=1"], ClusterResources(gpus=8, cpus=2), 1, False,
     ["7 rollout workers x 1 CPUs = 7 CPUs, the cluster has 2", "placement.cpus_per_worker=0.25 or rollout.num_workers=2"]),
    (["rollout.num_workers=1", "placement.gpus_per_worker=2"], ClusterResources(gpus=8, nodes=8), 1, False,
     ["placement.gpus_per_worker=2: a rollout worker's engine runs on one GPU (no tensor parallelism)",
      "placement.gpus_per_worker=1"]),
    (["rollout.num_workers=3", "placement.cpus_per_worker=1.25"], ClusterResources(gpus=8, nodes=2, cpus=4), 1,
     False, ["rollout worker 2 (1.25 CPUs) fits on no node (free CPUs per node: 0.75, 0.75)"]),
    (["rollout.num_workers=7"], ClusterResources(gpus=8, gpu_memory_gib=H100_GIB), 1, False,
     ["GPU 0 of node 0 (learner rank 0) needs an estimated", "it has 80 GiB",
      "raise grpo.gradient_accumulation_steps above 1"]),
    (["rollout.num_workers=7", "grpo.gradient_accumulation_steps=32", "grpo.gradient_checkpointing=true"],
     ClusterResources(gpus=8, gpu_memory_gib=H100_GIB), 1, False,
     ["largest part: optimizer", "fine-tune with LoRA", "placement.trainer_gpus=2"]),
    (["rollout.num_workers=14", "grpo.gradient_accumulation_steps=32", "grpo.gradient_checkpointing=true"],
     ClusterResources(gpus=8, gpu_memory_gib=24.0), 1, True,
     ["rollout-0, rollout-1", "placement.gpus_per_worker=1"]),
    (["placement.trainer_gpus=9", "rollout.backend=inprocess"], ClusterResources(gpus=16, nodes=2), 9, False,
     ["placement.trainer_gpus=9 but the driver's node has 8 GPUs"]),
]


@pytest.mark.parametrize("overrides, cluster, processes, lora, wanted", REFUSALS,
                         ids=[f"refuse-{i}" for i in range(len(REFUSALS))])
def test_impossible_layouts_refused_in_one_line(overrides: list[str], cluster: ClusterResources, processes: int,
                                                lora: bool, wanted: list[str]) -> None:
    with pytest.raises(UserInputError) as info:
        plan_for(overrides, cluster, lora=lora, processes=processes)
    message = str(info.value)
    print("\n" + message)
    assert "\n" not in message
    assert re.search(r"\b(placement|rollout|grpo)\.[a-z_]+", message), "names no config key to change"
    for text in wanted:
        assert text in message, (text, message)


def test_placement_config_rejects_bad_values() -> None:
    for bad in (dict(trainer_gpus=True), dict(trainer_gpus=1.5), dict(trainer_gpus=-1), dict(gpus_per_worker=-0.5),
                dict(gpus_per_worker=1.5), dict(cpus_per_worker=-1), dict(strategy="BEST"), dict(max_wait_s=0),
                dict(model_memory_gib=0), dict(gpus=1)):
        with pytest.raises(ValidationError):
            PlacementConfig(**bad)
    assert PlacementConfig(gpus_per_worker=2).gpus_per_worker == 2.0
    assert all(f.description for f in PlacementConfig.model_fields.values())
    assert TrainConfig().placement == PlacementConfig()


def test_model_shape_counts_parameters_like_transformers(tmp_path: Path) -> None:
    """The parameter count read from config.json equals the instantiated model's (Qwen2 with q/k/v biases
    and tied embeddings; Llama without biases, untied, grouped-query heads, explicit head_dim)."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    for name, params in QWEN_PARAMS.items():
        assert ModelShape.from_config(QWEN_CONFIGS[name]).params == params
    configs = [
        (Qwen2ForCausalLM, Qwen2Config(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)),
        (LlamaForCausalLM, LlamaConfig(vocab_size=310, hidden_size=48, intermediate_size=80, num_hidden_layers=3,
                                       num_attention_heads=6, num_key_value_heads=2, head_dim=16,
                                       tie_word_embeddings=False)),
    ]
    for i, (cls, config) in enumerate(configs):
        folder = tmp_path / str(i)
        cls(config).save_pretrained(str(folder))
        shape = read_model_shape(folder)
        assert shape is not None and shape.params == cls(config).num_parameters()
    assert read_model_shape(tmp_path / "missing") is None


def test_preflight_command_prints_the_plan(qwen_dirs: dict[str, Path], capsys: pytest.CaptureFixture) -> None:
    assert main(["preflight", "--config", "configs/train/gpu-7b.yaml", "--gpus", "8", "--gpu-memory-gib", "80", "--sharded",
                 f"model={qwen_dirs['7b']}"]) == 0
    out = capsys.readouterr().out
    assert "7.62B parameters" in out and "learner rank 3" in out and "rollout-3" in out
    assert "node 0 GPU 7" in out
    # learner.sharding in the config plans the same sharded learners as the flag
    assert main(["preflight", "--config", "configs/train/gpu-7b.yaml", "--gpus", "8", "--gpu-memory-gib", "80",
                 "learner.sharding=fsdp", f"model={qwen_dirs['7b']}"]) == 0
    assert capsys.readouterr().out == out
    assert main(["preflight", "--config", "configs/train/gpu-7b.yaml", "--gpus", "4", f"model={qwen_dirs['7b']}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "the cluster has 4" in err


def test_gpu_configs_fit_their_clusters(qwen_dirs: dict[str, Path]) -> None:
    """configs/train/gpu.yaml fits one 8-GPU node with every GPU used; gpu-7b.yaml too (4 sharded learners),
    with LoRA overrides (1 learner, 7 workers), and on two nodes both ways, as docs/gpu.md shows."""
    config = {"model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
              "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True}
    small = qwen_dirs["7b"].parent / "qwen-0.5b"
    small.mkdir(exist_ok=True)
    (small / "config.json").write_text(json.dumps(config))
    node = ClusterResources(gpus=8, gpu_memory_gib=H100_GIB, cpus=64)
    cases = [("configs/train/gpu.yaml", [f"model={small}"], {}),
             ("configs/train/gpu-7b.yaml", [f"model={qwen_dirs['7b']}"], dict(learner_processes=4, sharded=True)),
             ("configs/train/gpu-7b.yaml", [f"model={qwen_dirs['7b']}", "placement.trainer_gpus=1",
                                            "rollout.num_workers=7", "grpo.gradient_accumulation_steps=32"],
              dict(lora=True))]
    two = ClusterResources(gpus=16, nodes=2, gpu_memory_gib=H100_GIB, cpus=128)  # docs/gpu.md, recipe 3
    cases += [("configs/train/gpu-7b.yaml", [f"model={qwen_dirs['7b']}", "placement.trainer_gpus=1",
                                             "rollout.num_workers=15", "grpo.gradient_accumulation_steps=32"],
               dict(lora=True, cluster=two)),
              ("configs/train/gpu-7b.yaml", [f"model={qwen_dirs['7b']}", "placement.trainer_gpus=8",
                                             "rollout.num_workers=8", "grpo.gradient_accumulation_steps=4"],
               dict(learner_processes=8, sharded=True, cluster=two))]
    for path, overrides, kwargs in cases:
        cluster = kwargs.pop("cluster", node)
        plan = preflight(load_train_config(path, overrides), cluster, **kwargs)
        assert sum(load.reserved for load in plan.gpu_loads) == cluster.gpus, path
        assert all(load.memory_gib and load.memory_gib < H100_GIB for load in plan.gpu_loads), path


def test_cluster_resources_split_and_describe() -> None:
    two = ClusterResources(gpus=16, nodes=2, cpus=64)
    assert two.per_node == (NodeResources(8, 32.0), NodeResources(8, 32.0))
    uneven = ClusterResources(gpus=3, nodes=2, per_node=(NodeResources(1), NodeResources(2)))
    assert "[1+2]" in uneven.describe()
    with pytest.raises(ValueError):
        ClusterResources(gpus=3, nodes=2)


def test_planning_imports_neither_torch_nor_ray() -> None:
    """The plan is made before anything loads: its modules import no torch and no ray at import time."""
    import subprocess
    import sys

    code = ("import sys, training.cluster.plan, training.cluster.preflight, training.cluster.resources; "
            "print(sorted(m for m in ('torch', 'ray', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**__import__("os").environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])})
    assert out.stdout.strip() == "[]"
