"""Several learner processes (torchrun, gloo on CPU): the collectives, and whole training runs that must
equal a one-process run with the same global batch -- the same episodes, weights and logs, one W&B run."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from resume_runs import (  # noqa: F401 -- reference_run is a fixture
    RESUME_STEPS,
    TRAIN_CFG,
    comparable_rows,
    reference_run,
    resume_overrides,
    weights,
)

REPO = Path(__file__).resolve().parents[3]
#: Seconds a test waits for a torchrun job.
DDP_WAIT_S = 300
#: Learner processes of the multi-process tests.
PROCESSES = 2


# -- the collectives ----------------------------------------------------------------------------------
def test_collectives_are_the_identity_in_one_process():
    from training.trainer.distributed import (
        broadcast_from_main,
        gather_to_main,
        learner_from_env,
        max_over_processes,
        run_on_main,
        scatter_from_main,
    )

    assert learner_from_env().is_main and not learner_from_env().distributed
    assert gather_to_main({"a": 1}) == [{"a": 1}]
    assert scatter_from_main(["mine"]) == "mine"
    assert broadcast_from_main((1, "x")) == (1, "x")
    assert max_over_processes(3) == 3 and max_over_processes(False) == 0
    assert run_on_main(lambda: 7, share=True) == 7


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _collectives_worker(rank: int, port: int, out: str) -> None:
    """One of two gloo processes: run every collective and write what this process saw."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2",
                      LOCAL_RANK=str(rank))
    import torch.distributed as dist

    from training.errors import UserInputError
    from training.trainer import distributed as d

    dist.init_process_group("gloo", rank=rank, world_size=2)
    seen: dict = {"gathered": d.gather_to_main([rank] * (rank + 1))}
    seen["scattered"] = d.scatter_from_main([f"part{r}" for r in range(2)] if rank == 0 else None)
    seen["broadcast"] = d.broadcast_from_main({"from": rank})
    seen["max"] = d.max_over_processes(rank * 5)
    seen["shared"] = d.run_on_main(lambda: f"made by {rank}", share=True)

    def refuse() -> None:
        raise UserInputError("no checkpoint under runs/x")

    def crash() -> None:
        raise ValueError("disk full")

    for name, fn in (("user_error", refuse), ("crash", crash)):
        try:
            d.run_on_main(fn)
            seen[name] = None
        except Exception as exc:  # noqa: BLE001 -- the type and text are what is checked
            seen[name] = [type(exc).__name__, str(exc)]
    dist.destroy_process_group()
    Path(out, f"rank{rank}.json").write_text(json.dumps(seen))


def test_collectives_over_two_gloo_processes(tmp_path: Path):
    import torch.multiprocessing as mp

    mp.spawn(_collectives_worker, args=(_free_port(), str(tmp_path)), nprocs=2, join=True)
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2))
    assert r0["gathered"] == [[0], [1, 1]] and r1["gathered"] is None
    assert (r0["scattered"], r1["scattered"]) == ("part0", "part1")
    assert r0["broadcast"] == r1["broadcast"] == {"from": 0}
    assert r0["max"] == r1["max"] == 5
    assert r0["shared"] == r1["shared"] == "made by 0"
    # a user-input error on the main process is the same one line everywhere; anything else is named
    assert r0["user_error"] == r1["user_error"] == ["UserInputError", "no checkpoint under runs/x"]
    assert r0["crash"] == ["ValueError", "disk full"]
    assert r1["crash"] == ["RuntimeError", "the main learner process failed (ValueError: disk full)"]


def test_the_global_batch_must_split_over_the_processes():
    from training.config.train import TrainConfig
    from training.errors import UserInputError

    cfg = TrainConfig.model_validate({"grpo": {"groups_per_step": 3, "num_generations": 2}})
    assert cfg.per_process_batch(1) == 6 and cfg.per_process_batch(2) == 3 and cfg.per_process_batch(3) == 2
    with pytest.raises(UserInputError, match="episodes_per_step=6 does not split over 4 learner"):
        cfg.per_process_batch(4)


# -- whole runs under torchrun -------------------------------------------------------------------------
def assert_same_learning(run: Path, reference: Path) -> None:
    """Bitwise the same final weights and episodes, and the same metrics row for row; what is computed from
    the trainer's forward pass over the rollout (the mismatch, the correction weight and the entropy: float32
    noise, each process scores a smaller, differently padded batch) within 1e-6."""
    import torch

    a, b = weights(run), weights(reference)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), "final weights differ"
    assert comparable_rows(run / "episodes.jsonl") == comparable_rows(reference / "episodes.jsonl")
    got, want = comparable_rows(run / "metrics.jsonl"), comparable_rows(reference / "metrics.jsonl")
    assert [sorted(r) for r in got] == [sorted(r) for r in want]
    for g, w in zip(got, want):
        exact = {k for k in g if not k.startswith(("mismatch/", "rollout_correction/")) and k != "train/entropy"}
        assert {k: g[k] for k in exact} == {k: w[k] for k in exact}
        assert {k: g[k] for k in g if k not in exact} == pytest.approx({k: w[k] for k in w if k not in exact},
                                                                        rel=0, abs=1e-6)


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
            "RAY_USAGE_STATS_ENABLED": "0", "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1"}


def _torchrun(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(PROCESSES),
            "--master_port", str(_free_port()), "-m", "training.cli", "train", *args]


@pytest.mark.slow
def test_two_processes_with_ray_play_and_learn_what_one_plays(reference_run: Path, policy_wide_model_dir: Path,
                                                              tmp_path: Path):
    """DDP over two gloo processes with the Ray backend: one W&B run, each step's episodes once, and the
    same episodes, logs and final weights as the one-process reference with the same global batch."""
    args = ["--config", TRAIN_CFG, *resume_overrides(policy_wide_model_dir, tmp_path, "ref"),
            "rollout.backend=ray", "rollout.num_workers=1", "wandb.mode=offline"]
    done = subprocess.run(_torchrun(args), cwd=REPO, env=_env(), capture_output=True, text=True, timeout=DDP_WAIT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    run = tmp_path / "ref"
    assert done.stdout.count("Training finished") == 1 and "learner_processes 2" in done.stdout
    assert len(list((run / "wandb").glob("offline-run-*"))) == 1
    summary = json.loads((run / "summary.json").read_text())
    assert summary["episodes"] == RESUME_STEPS * 2 and summary["learner_processes"] == PROCESSES
    assert "pre-flight placement plan" in done.stderr and "learner rank 1" in done.stderr
    assert "placement group ready: 1 bundles" in done.stderr  # the one worker sits in the run's reservation
    assert_same_learning(run, reference_run)


def _wait_for_checkpoint(run: Path, proc: subprocess.Popen) -> None:
    deadline = time.time() + DDP_WAIT_S
    while not (run / "checkpoints" / "checkpoint-1" / "manifest.json").is_file():
        if proc.poll() is not None:
            raise AssertionError(f"torchrun ended (rc {proc.returncode}) before the first checkpoint")
        if time.time() > deadline:
            proc.kill()
            raise AssertionError("timed out waiting for the first checkpoint")
        time.sleep(0.1)


@pytest.mark.slow
def test_sigterm_to_torchrun_saves_one_checkpoint_and_resume_is_exact(reference_run: Path,
                                                                      policy_wide_model_dir: Path, tmp_path: Path):
    """SIGTERM to the launcher: every learner process stops at the same step, the main one saves, and a
    torchrun --resume ends with the reference run's weights and logs."""
    args = ["--config", TRAIN_CFG, *resume_overrides(policy_wide_model_dir, tmp_path, "ref")]
    run = tmp_path / "ref"
    proc = subprocess.Popen(_torchrun(args), cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    _wait_for_checkpoint(run, proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=DDP_WAIT_S)
    assert proc.returncode != 0
    from training.trainer.checkpoints import checkpoint_step, checkpoints, verify_checkpoint

    sealed = [checkpoint_step(c) for c in checkpoints(run / "checkpoints") if not verify_checkpoint(c)]
    assert sealed and 1 <= max(sealed) < RESUME_STEPS, sealed  # stopped early, with a complete checkpoint
    assert not (run / "final").exists()
    # a process that got to print says where all stopped (torchrun may end one before it prints)
    lines = [line for line in err.splitlines() if line.startswith("replicalab train: interrupted by SIGTERM")]
    assert {int(line.split("checkpoint saved at step ")[1].split()[0]) for line in lines} <= {max(sealed)}, lines
    resumed = subprocess.run(_torchrun([*args, "--resume"]), cwd=REPO, env=_env(), capture_output=True, text=True,
                             timeout=DDP_WAIT_S)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert_same_learning(run, reference_run)


def test_a_checkpoint_of_two_processes_needs_both_rng_states(tmp_path: Path):
    from training.trainer.checkpoints import verify_checkpoint, write_manifest

    ckpt = tmp_path / "checkpoint-2"
    ckpt.mkdir()
    for name in ("optimizer.pt", "scheduler.pt", "trainer_state.json", "model.safetensors", "rng_state_0.pth"):
        (ckpt / name).write_bytes(b"x")
    write_manifest(ckpt, 2, processes=2)
    assert verify_checkpoint(ckpt) == ["rng_state_1.pth never written"]
    (ckpt / "rng_state_1.pth").write_bytes(b"y")
    write_manifest(ckpt, 2, processes=2)
    assert verify_checkpoint(ckpt) == []
    write_manifest(ckpt, 2)  # one process writes rng_state.pth
    assert verify_checkpoint(ckpt) == ["rng_state.pth never written"]
