"""Several learner processes (torchrun, gloo on CPU): the collectives, and whole training runs that must
equal a one-process run with the same global batch -- the same episodes, rewards and logs, one W&B run, and the
same final weights up to the order in which gloo's all-reduce sums the gradients.

The whole runs learn on the coin model (``tests/coin_model.py``): every group's episodes differ in reward, so every
step's gradients are real and DDP averages them over the processes (a model that never parses would give every
episode the same reward, zero advantages and nothing for the all-reduce to get wrong).
"""

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
from coin_model import COIN_OVERRIDES
from resume_runs import RESUME_STEPS, TRAIN_CFG, comparable_rows, resume_overrides, weights

REPO = Path(__file__).resolve().parents[3]
#: Seconds a test waits for a torchrun job.
DDP_WAIT_S = 300
#: Learner processes of the multi-process tests.
PROCESSES = 2
#: Largest difference (absolute) allowed between the final weights of a two-process run and the one-process run
#: with the same global batch.  One process sums both episodes' gradients in one backward pass; two processes each
#: backpropagate one episode and gloo all-reduces the halves, so the averaged gradient differs in its last float32
#: bits and Adam carries that into the weights.  Measured (2-core CPU): at most 3.7e-9 after ``RESUME_STEPS`` steps,
#: which moved weights by up to 1e-3 (lr 2e-4); a wrong average (a process stepping on its own episode's gradient,
#: a skipped all-reduce) changes Adam's step by a sizeable fraction of lr, orders of magnitude above this.
DDP_WEIGHTS_ATOL = 1e-6
#: Learner-side metrics (computed from the trainer's forward and backward passes, so float32 noise between a
#: batch of two and two batches of one) compared within ``DDP_METRICS_TOL`` (relative and absolute); every other
#: logged value -- the rewards, their groups' spread, the episodes -- must be equal.
LEARNER_METRICS = ("train/loss", "train/grad_norm", "train/entropy")
DDP_METRICS_TOL = 1e-5
#: The same forward pass over a batch padded otherwise sums its float32 terms in another order: the entropy of
#: a run has come out 1.2e-6 apart (relative) from the one-process run's, a few float32 ulps of a mean over
#: hundreds of tokens.  Relative and absolute; a wrong batch (another episode, a lost token) moves it by far more.
PADDING_METRICS_TOL = 1e-5


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


@pytest.mark.slow
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
def assert_same_learning(run: Path, reference: Path, *, weights_atol: float = 0.0) -> None:
    """The same episodes and the same metrics row for row, and the same final weights: bitwise by default (what
    the trainer computes from its forward pass over the rollout -- the mismatch, the correction weight and the
    entropy: each process scores a smaller, differently padded batch -- within ``PADDING_METRICS_TOL``), or within
    ``weights_atol`` (the runs averaged their gradients in different orders: then ``LEARNER_METRICS`` too within
    ``DDP_METRICS_TOL``).  Every other logged value, the rewards among them, must be equal."""
    import torch

    a, b = weights(run), weights(reference)
    assert a.keys() == b.keys(), "final weights differ in their names"
    if weights_atol:
        worst = max(float((a[k].float() - b[k].float()).abs().max()) for k in a)
        assert worst <= weights_atol, f"final weights differ by up to {worst:.3g} (allowed {weights_atol:g})"
    else:
        assert all(torch.equal(a[k], b[k]) for k in a), "final weights differ"
    assert comparable_rows(run / "episodes.jsonl") == comparable_rows(reference / "episodes.jsonl")
    got, want = comparable_rows(run / "metrics.jsonl"), comparable_rows(reference / "metrics.jsonl")
    assert [sorted(r) for r in got] == [sorted(r) for r in want]
    noisy, rel, tol = (LEARNER_METRICS, DDP_METRICS_TOL, DDP_METRICS_TOL) if weights_atol else \
        (("train/entropy",), PADDING_METRICS_TOL, PADDING_METRICS_TOL)
    for g, w in zip(got, want):
        exact = {k for k in g if not k.startswith(("mismatch/", "rollout_correction/")) and k not in noisy}
        assert {k: g[k] for k in exact} == {k: w[k] for k in exact}, f"step {w.get('step')}"
        assert {k: g[k] for k in g if k not in exact} == pytest.approx({k: w[k] for k in w if k not in exact},
                                                                        rel=rel, abs=tol), f"step {w.get('step')}"


def step_rewards(run: Path) -> list[list[float]]:
    """Each step's Scientist rewards, in episode order, from the run's episodes.jsonl."""
    steps: dict[int, list[float]] = {}
    for row in comparable_rows(run / "episodes.jsonl"):
        steps.setdefault(row["step"], []).append(row["log"]["role_rewards"][row["role"]])
    return [steps[s] for s in sorted(steps)]


@pytest.fixture(scope="module")
def coin_reference_run(policy_coin_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One learner process, ``RESUME_STEPS`` steps of one group of two episodes on the coin model; checked to have
    learned from real gradients: every step's group differs in reward and the gradient norm is not zero."""
    from training.config.train import load_train_config
    from training.trainer.run import run_train

    out = tmp_path_factory.mktemp("coin-reference")
    cfg = load_train_config(TRAIN_CFG, [*resume_overrides(policy_coin_model_dir, out, "ref"), *COIN_OVERRIDES])
    assert run_train(cfg)["steps"] == RESUME_STEPS
    assert all(len(set(rewards)) > 1 for rewards in step_rewards(cfg.run_dir)), step_rewards(cfg.run_dir)
    rows = [json.loads(line) for line in (cfg.run_dir / "metrics.jsonl").read_text().splitlines()]  # as logged
    learned = [r for r in rows if "train/grad_norm" in r]
    assert len(learned) == RESUME_STEPS and all(r["train/grad_norm"] > 0 for r in learned), learned
    return cfg.run_dir


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
            "RAY_USAGE_STATS_ENABLED": "0", "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1"}


def _torchrun(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(PROCESSES),
            "--master_port", str(_free_port()), "-m", "training.cli", "train", *args]


@pytest.mark.slow
def test_two_processes_with_ray_play_and_learn_what_one_plays(coin_reference_run: Path, policy_coin_model_dir: Path,
                                                              tmp_path: Path):
    """DDP over two gloo processes with the Ray backend: one W&B run, each step's episodes once, and the
    same episodes, rewards and logs as the one-process reference with the same global batch, and its final weights
    up to ``DDP_WEIGHTS_ATOL``."""
    args = ["--config", TRAIN_CFG, *resume_overrides(policy_coin_model_dir, tmp_path, "ref"), *COIN_OVERRIDES,
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
    assert step_rewards(run) == step_rewards(coin_reference_run)
    assert_same_learning(run, coin_reference_run, weights_atol=DDP_WEIGHTS_ATOL)


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
def test_sigterm_to_torchrun_saves_one_checkpoint_and_resume_is_exact(coin_reference_run: Path,
                                                                      policy_coin_model_dir: Path, tmp_path: Path):
    """SIGTERM to the launcher: every learner process stops at the same step, the main one saves, and a
    torchrun --resume ends with the one-process reference run's episodes, rewards and logs, and its weights up to
    ``DDP_WEIGHTS_ATOL``."""
    args = ["--config", TRAIN_CFG, *resume_overrides(policy_coin_model_dir, tmp_path, "ref"), *COIN_OVERRIDES]
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
    assert step_rewards(run) == step_rewards(coin_reference_run)
    assert_same_learning(run, coin_reference_run, weights_atol=DDP_WEIGHTS_ATOL)


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
