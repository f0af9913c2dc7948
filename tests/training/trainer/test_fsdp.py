"""A sharded learner on CPU: two gloo processes under torchrun train a tiny model through the real trainer with
``learner.sharding=fsdp`` (FSDP2), in each checkpoint format (``learner.fsdp_checkpoint``: sharded, full). The
model is the coin model (``tests/coin_model.py``), whose GRPO groups differ in reward, so every step has real
gradients to reduce-scatter. Every checkpoint verifies; a run resumed from its middle checkpoint ends in exactly
the uninterrupted run's state (final weights, model and optimizer state, step, logs); and the FSDP run learns
what a DDP run of the same global batch learns, bitwise.  Also: the process group's timeout is the configured one.

accelerate 1.15 builds FSDP only on GPU-class devices (on CPU it builds DDP, which the run refuses: tested
below); ``tests/fsdp_cpu_launch.py`` lifts that one gate in the test's processes, so FSDP2 itself runs here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from coin_model import COIN_OVERRIDES
from resume_runs import RESUME_STEPS, TRAIN_CFG, comparable_rows, resume_overrides, weights

REPO = Path(__file__).resolve().parents[3]
LAUNCH = str(REPO / "tests" / "fsdp_cpu_launch.py")
#: Seconds a test waits for a torchrun job.
WAIT_S = 300
FSDP = ["learner.sharding=fsdp"]
#: The checkpoint the resumed run starts from (the run stopped after this step).
RESUME_FROM = 2

pytestmark = pytest.mark.slow


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
            "RAY_USAGE_STATS_ENABLED": "0", "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1"}


def _torchrun(entry: list[str], args: list[str]) -> subprocess.CompletedProcess:
    from test_distributed import _free_port

    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(_free_port()),
           *entry, "train", *args]
    return subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=WAIT_S)


#: A run of the coin model: 4 episodes (one GRPO group) a step, 2 per process; a checkpoint every step, all kept.
#: That no step has reward variance has probability at most 0.008 ** RESUME_STEPS (coin_model.py).
COIN_RUN = ["grpo.groups_per_step=1", "grpo.num_generations=4", "rollout.backend=inprocess", "checkpoint.save_steps=1",
            "checkpoint.save_total_limit=10", "validation.every_steps=0", "rollout.sampling.max_new_tokens=128",
            *COIN_OVERRIDES, "wandb.mode=disabled", "device=cpu", f"grpo.max_steps={RESUME_STEPS}"]


def coin_args(model: Path, out: Path, name: str) -> list[str]:
    return ["--config", TRAIN_CFG, *COIN_RUN, f"model={model}", f"output_dir={out}", f"run_name={name}"]


@pytest.fixture(scope="module")
def ddp_run(policy_coin_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same run with two unsharded (DDP) learner processes."""
    out = tmp_path_factory.mktemp("ddp")
    done = _torchrun(["-m", "training.cli"], coin_args(policy_coin_model_dir, out, "ddp"))
    assert done.returncode == 0, done.stderr[-3000:]
    return out / "ddp"


#: Per checkpoint format: the layout its manifests record, and the files holding the model and optimizer.
FORMATS = {"sharded": ("fsdp_sharded", ("pytorch_model_fsdp_0", "optimizer_0")),
           "full": ("fsdp_full", ("pytorch_model_fsdp.bin", "optimizer.bin"))}


@pytest.fixture(scope="module", params=list(FORMATS))
def fsdp_run(request: pytest.FixtureRequest, policy_coin_model_dir: Path,
             tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """An uninterrupted ``RESUME_STEPS``-step FSDP run of two processes (a checkpoint after every step) in one
    checkpoint format, and its overrides."""
    out = tmp_path_factory.mktemp(f"fsdp-{request.param}")
    args = [*coin_args(policy_coin_model_dir, out, "fsdp"), *FSDP, f"learner.fsdp_checkpoint={request.param}"]
    done = _torchrun([LAUNCH], args)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "learner_processes 2" in done.stdout
    return out / "fsdp", args


def _state(path: Path, scratch: Path) -> dict:
    """What a checkpoint's model or optimizer entry holds, as one dict: a torch.save file, or every process's
    shards of a torch.distributed.checkpoint directory."""
    import torch

    if path.is_dir():
        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

        dcp_to_torch_save(str(path), str(scratch))
        path = scratch
    return torch.load(str(path), weights_only=False)


def _assert_same_tree(a, b, where: str = "") -> None:
    import torch

    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and torch.equal(a, b), f"{where} differs"
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), f"{where}: keys differ"
        for key in a:
            _assert_same_tree(a[key], b[key], f"{where}/{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), f"{where}: lengths differ"
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_same_tree(x, y, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def test_fsdp_checkpoints_have_the_formats_layout_and_verify(fsdp_run: tuple[Path, list[str]],
                                                             policy_coin_model_dir: Path):
    from training.trainer.checkpoints import checkpoint_step, checkpoints, read_manifest, verify_checkpoint

    run, args = fsdp_run
    layout, parts = FORMATS[args[-1].split("=")[1]]
    found = checkpoints(run / "checkpoints")
    assert [checkpoint_step(c) for c in found] == list(range(1, RESUME_STEPS + 1))
    for ckpt in found:
        assert verify_checkpoint(ckpt) == [], ckpt
        manifest = read_manifest(ckpt)
        assert manifest["layout"] == layout and manifest["processes"] == 2
        files = set(manifest["files"])
        assert "optimizer.pt" not in files
        if layout == "fsdp_sharded":
            for folder in parts:  # each process wrote its shard
                assert {f"{folder}/.metadata", f"{folder}/__0_0.distcp", f"{folder}/__1_0.distcp"} <= files
        else:
            assert set(parts) <= files
    # final/ is a whole model, written as from_pretrained reads it (the tied output head once, not twice), and
    # training moved every weight
    import torch
    from safetensors.torch import load_file

    final, start = weights(run), load_file(str(policy_coin_model_dir / "model.safetensors"))
    assert set(start) == set(final) and all(not torch.equal(start[k], final[k]) for k in start)


def test_fsdp_learns_what_ddp_learns(fsdp_run: tuple[Path, list[str]], ddp_run: Path):
    """Sharded or replicated, two processes with the same global batch end with bitwise the same weights, play
    the same episodes and log the same metrics."""
    from test_distributed import assert_same_learning

    assert_same_learning(fsdp_run[0], ddp_run)


def test_fsdp_resume_ends_in_the_uninterrupted_state(fsdp_run: tuple[Path, list[str]], tmp_path: Path):
    """A copy of the run stopped after step ``RESUME_FROM`` (later checkpoints and ``final/`` gone, logs still
    holding the later steps) resumes under FSDP and ends bitwise where the uninterrupted run ended."""
    fsdp_run, args = fsdp_run
    run = tmp_path / "fsdp"
    shutil.copytree(fsdp_run, run)
    shutil.rmtree(run / "final")
    for step in range(RESUME_FROM + 1, RESUME_STEPS + 1):
        shutil.rmtree(run / "checkpoints" / f"checkpoint-{step}")
    tick = time.perf_counter()
    args = [a.replace(f"output_dir={fsdp_run.parent}", f"output_dir={tmp_path}") for a in args]
    done = _torchrun([LAUNCH], [*args, "--resume"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"checkpoint-{RESUME_FROM}" in done.stdout, done.stdout[-2000:]
    print(f"resumed FSDP run: {time.perf_counter() - tick:.1f} s")
    a, b = weights(run), weights(fsdp_run)
    assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a), "final weights differ"
    for name in ("metrics.jsonl", "episodes.jsonl"):
        assert comparable_rows(run / name) == comparable_rows(fsdp_run / name), name
    last = f"checkpoint-{RESUME_STEPS}"
    mine, theirs = run / "checkpoints" / last, fsdp_run / "checkpoints" / last
    state = [json.loads((c / "trainer_state.json").read_text()) for c in (mine, theirs)]
    assert state[0]["global_step"] == state[1]["global_step"] == RESUME_STEPS
    keep = lambda rows: [{k: v for k, v in r.items() if "runtime" not in k and "per_second" not in k  # noqa: E731
                          and k != "step_time"} for r in rows]
    assert keep(state[0]["log_history"]) == keep(state[1]["log_history"])
    for part in FORMATS[args[-1].split("=")[1]][1]:  # the model's and the optimizer's whole state
        _assert_same_tree(_state(mine / part, tmp_path / "mine.pt"), _state(theirs / part, tmp_path / "theirs.pt"),
                          part)


def test_fsdp_on_cpu_without_the_gate_lifted_is_refused_not_run_as_ddp(policy_wide_model_dir: Path, tmp_path: Path):
    done = _torchrun(["-m", "training.cli"], ["--config", TRAIN_CFG, *resume_overrides(policy_wide_model_dir, tmp_path,
                                                                                        "ddp", steps=1), *FSDP])
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if line.startswith("replicalab train:")]
    assert lines and all("learner.sharding=fsdp but accelerate built a none learner (MULTI_CPU)" in line
                         for line in lines), done.stderr[-2000:]
    from training.trainer.checkpoints import checkpoints

    assert not checkpoints(tmp_path / "ddp" / "checkpoints")  # refused before the first step


def _timeout_worker(rank: int, port: int, timeout_s: float, main_busy_s: float, out: str) -> None:
    """Rank 0 is busy for ``main_busy_s`` before a barrier; rank 1 waits in it under ``timeout_s``."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2",
                      LOCAL_RANK=str(rank))
    from training.trainer.distributed import barrier, init_learner

    init_learner("cpu", timeout_s=timeout_s)
    tick = time.perf_counter()
    if rank == 0:
        time.sleep(main_busy_s)
    try:
        barrier()
        outcome = "passed"
    except RuntimeError:  # torch's DistBackendError: the wait ran past the group's timeout
        outcome = "timed out"
    Path(out, f"rank{rank}.json").write_text(json.dumps([outcome, time.perf_counter() - tick]))
    os._exit(0)  # the group is broken after a timeout: no orderly teardown


@pytest.mark.parametrize("timeout_s, busy_s, waited", [(2.0, 8.0, "timed out"), (20.0, 4.0, "passed")])
def test_the_process_group_waits_as_long_as_configured(tmp_path: Path, timeout_s: float, busy_s: float, waited: str):
    import torch.multiprocessing as mp
    from test_distributed import _free_port

    mp.spawn(_timeout_worker, args=(_free_port(), timeout_s, busy_s, str(tmp_path)), nprocs=2, join=True)
    outcome, seconds = json.loads((tmp_path / "rank1.json").read_text())
    assert outcome == waited, outcome
    if waited == "passed":
        assert seconds >= busy_s - 0.5  # it waited out the main process's work
    else:
        assert timeout_s - 0.5 <= seconds < busy_s  # it gave up at the timeout, not later
