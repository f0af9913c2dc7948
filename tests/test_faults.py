"""Faults off the happy path: rollout workers killed at each moment, training interrupted by signals or
killed outright and resumed, Ray sessions of a killed driver cleaned up.  All slow (Ray or training).

Reference for the interrupt tests: ``test_resume.reference_run`` (an uninterrupted run of the same
config); an interrupted-and-resumed run must match it bitwise in weights and row for row in its logs.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest
from resume_runs import (  # noqa: F401 -- reference_run is a fixture
    RESUME_STEPS,
    TRAIN_CFG,
    assert_same_run,
    reference_run,
    resume_overrides,
)

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
#: Seconds a test waits for a training subprocess to reach a point or to finish.
FAULT_WAIT_S = 300
#: Job ids of a fault test's collect: 4 GRPO groups of 2, shards of 4 per worker.
FAULT_JOBS = 8


# -- rollout workers killed at each moment (real Ray, 2 workers) -----------------------------------
@pytest.fixture()
def pool(ray_cluster: None, policy_wide_model_dir: Path) -> Iterator:
    from training.config.model import SamplingConfig
    from training.rollout.contract import RolloutSpec
    from training.rollout.ray_backend import RayBackend, RayPool

    spec = RolloutSpec(model=str(policy_wide_model_dir), scientist="policy", lab_manager="scripted",
                       sampling=SamplingConfig(max_new_tokens=16, seed=0), max_rounds=2)
    backend = RayBackend(spec, RayPool(num_workers=2, max_restarts=2))
    yield backend
    backend.close()


def fault_jobs(offset: int = 0) -> list:
    from replicalab import DIFFICULTIES, TEMPLATES, TRAIN_SEEDS
    from training.rollout.records import EpisodeJob

    return [EpisodeJob(job_id=offset + i, seed=TRAIN_SEEDS[i // 2], template=TEMPLATES[(i // 2) % len(TEMPLATES)],
                       difficulty=DIFFICULTIES[(i // 2) % len(DIFFICULTIES)], role="scientist", group=i // 2)
            for i in range(FAULT_JOBS)]


def worker_pid(backend, slot: int) -> int:
    import ray

    return ray.get(backend.workers[slot].ready.remote())["pid"]


def sigkill_and_wait(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} survived SIGKILL")


def check_exact(jobs, records, version: int) -> None:
    """Every configured episode exactly once, in order, with the current weights."""
    assert [r.job.job_id for r in records] == [j.job_id for j in jobs]
    assert len({r.job.job_id for r in records}) == len(jobs)
    assert len({(r.log.episode_id, r.job.job_id) for r in records}) == len(jobs)
    assert all(r.weights_version == version for r in records)


def step(backend, state, version: int, offset: int = 0):
    backend.set_weights(state, version)
    jobs = fault_jobs(offset)
    return jobs, backend.collect(jobs, sampling_seed=version)


def test_worker_killed_idle_between_steps(pool, caplog: pytest.LogCaptureFixture) -> None:
    """SIGKILL a worker's OS process between two steps: the next step replaces it and is exact."""
    state = pool.worker_states()[0]
    jobs, first = step(pool, state, 1)
    check_exact(jobs, first, 1)
    victim, name = worker_pid(pool, 1), pool.names[1]
    sigkill_and_wait(victim)
    with caplog.at_level(logging.WARNING, logger="training"):
        jobs, records = step(pool, state, 2, offset=100)
    check_exact(jobs, records, 2)
    assert pool.restarts == 1 and worker_pid(pool, 1) != victim
    text = caplog.text
    assert name in text and str(victim) in text and "died while loading weights version 2" in text


def test_worker_killed_after_weights_before_collect(pool, caplog: pytest.LogCaptureFixture) -> None:
    """Killed after it loaded this step's weights, before the collect: its shard is re-run on a
    replacement that loads the same weights; records carry the current version."""
    state = pool.worker_states()[0]
    pool.set_weights(state, 3)
    victim = worker_pid(pool, 0)
    sigkill_and_wait(victim)
    jobs = fault_jobs(200)
    with caplog.at_level(logging.WARNING, logger="training"):
        records = pool.collect(jobs, sampling_seed=3)
    check_exact(jobs, records, 3)
    assert pool.restarts == 1
    assert "re-running 4 episodes (jobs [200, 201, 202, 203])" in caplog.text


def test_worker_killed_mid_collect(pool, caplog: pytest.LogCaptureFixture) -> None:
    """SIGKILL while its shard is being played (generation slowed so the kill lands mid-collect): the
    step completes with exactly the configured episodes, identical to an undisturbed one."""
    import threading

    import ray

    state = pool.worker_states()[0]
    jobs, undisturbed = step(pool, state, 4, offset=300)
    pool.set_weights(state, 4)
    victim = worker_pid(pool, 1)
    ray.get(pool.workers[1].inject_fault.remote(delay_s=0.5))
    killer = threading.Timer(1.0, lambda: os.kill(victim, signal.SIGKILL))
    killer.start()
    with caplog.at_level(logging.WARNING, logger="training"):
        records = pool.collect(jobs, sampling_seed=4)
    killer.join()
    check_exact(jobs, records, 4)
    assert pool.restarts == 1 and "re-running 4 episodes" in caplog.text
    assert [r.trajectory for r in records] == [r.trajectory for r in undisturbed]


def test_worker_dies_while_loading_weights(pool) -> None:
    """A worker that dies inside ``set_weights`` is replaced; the replacement holds the new weights."""
    import ray

    state = pool.worker_states()[0]
    changed = {k: (v + np.float32(0.01)).astype(np.float32) for k, v in state.items()}
    ray.get(pool.workers[0].inject_fault.remote(crash_on_weights=True))
    jobs, records = step(pool, changed, 5, offset=400)
    check_exact(jobs, records, 5)
    assert pool.restarts == 1
    for theirs in pool.worker_states():
        assert all(np.array_equal(theirs[k], changed[k]) for k in changed)


def test_restarts_are_bounded_with_one_line_error(pool) -> None:
    import ray

    from training.rollout.contract import WorkerFailure

    state = pool.worker_states()[0]
    pool.max_restarts = 0
    ray.get(pool.workers[0].inject_fault.remote(crash_on_weights=True))
    with pytest.raises(WorkerFailure) as err:
        pool.set_weights(state, 6)
    assert "rollout.max_worker_restarts=0" in str(err.value) and "\n" not in str(err.value)
    pool.max_restarts = 2
    jobs, records = step(pool, state, 7, offset=500)  # the pool is whole again
    check_exact(jobs, records, 7)


# -- interrupts and crashes of the training driver (in-process backend, CLI subprocess) -------------
def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled",
            "TOKENIZERS_PARALLELISM": "false", "RAY_USAGE_STATS_ENABLED": "0"}


def _start_train(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "training.cli", "train", *args], cwd=REPO, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(predicate, proc: subprocess.Popen, what: str) -> None:
    deadline = time.time() + FAULT_WAIT_S
    while time.time() < deadline:
        if predicate():
            return
        if proc.poll() is not None:
            raise AssertionError(f"training ended (rc {proc.returncode}) before {what}: {proc.stderr.read()[-2000:]}")
        time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"timed out waiting for {what}")


def _trained_steps(run: Path) -> int:
    """Optimizer steps finished so far (rows of TRL's per-step training metrics)."""
    path = run / "metrics.jsonl"
    if not path.exists():
        return 0
    return sum('"train/loss"' in line for line in path.read_text().splitlines())


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGUSR1, 138)],
                         ids=["SIGINT", "SIGTERM", "SIGUSR1"])  # SIGUSR1: SLURM's warning before the time limit
def test_signal_saves_checkpoint_prints_resume_and_resume_is_exact(reference_run: Path, policy_wide_model_dir: Path,  # noqa: F811
                                                                   tmp_path: Path, sig: int, code: int) -> None:
    args = ["--config", TRAIN_CFG, *resume_overrides(policy_wide_model_dir, tmp_path, "ref")]
    run = tmp_path / "ref"
    proc = _start_train(args)
    _wait_for(lambda: _trained_steps(run) >= 1, proc, "the first step")
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=FAULT_WAIT_S)
    assert proc.returncode == code, err[-2000:]
    last = err.strip().splitlines()[-1]
    assert "Traceback" not in err and last.startswith("replicalab train: interrupted by")
    command = last.split("continue with: ", 1)[1]
    assert command.endswith("--resume") and f"output_dir={tmp_path}" in command
    step = int(last.split("checkpoint saved at step ")[1].split()[0])
    assert 1 <= step < RESUME_STEPS, last
    assert (run / "checkpoints" / f"checkpoint-{step}" / "manifest.json").is_file()
    assert not (run / "final").exists()
    words = command.split()
    assert words[:2] == ["replicalab", "train"]
    resumed = subprocess.run([sys.executable, "-m", "training.cli", *words[1:]], cwd=REPO, env=_env(),
                             capture_output=True, text=True, timeout=FAULT_WAIT_S)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"checkpoint-{step}" in resumed.stdout
    assert_same_run(run, reference_run)


def test_sigkilled_driver_then_resume_logs_each_step_once(reference_run: Path, policy_wide_model_dir: Path,  # noqa: F811
                                                          tmp_path: Path) -> None:
    """SIGKILL the driver after a checkpoint, mid-way through the next step's logging; --resume drops
    what was logged after the checkpoint, so every step appears once and the run equals the reference."""
    args = ["--config", TRAIN_CFG, *resume_overrides(policy_wide_model_dir, tmp_path, "ref")]
    run = tmp_path / "ref"
    proc = _start_train(args)

    def past_checkpoint_2() -> bool:
        manifest = run / "checkpoints" / "checkpoint-2" / "manifest.json"
        if not manifest.is_file():
            return False
        logged = json.loads(manifest.read_text())["logs"]["episodes.jsonl"]
        path = run / "episodes.jsonl"
        return len(path.read_text().splitlines()) > logged  # step 3's episodes are already logged

    _wait_for(past_checkpoint_2, proc, "step 3's rollout")
    proc.kill()
    proc.wait(timeout=60)
    resumed = subprocess.run([sys.executable, "-m", "training.cli", "train", *args, "--resume"], cwd=REPO,
                             env=_env(), capture_output=True, text=True, timeout=FAULT_WAIT_S)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert_same_run(run, reference_run)


# -- Ray processes of a killed driver ----------------------------------------------------------------
DRIVER = """
import os, sys, time
from pathlib import Path
from training.config.model import SamplingConfig
from training.rollout.contract import RolloutSpec
from training.rollout.ray_backend import RayBackend, RayPool
spec = RolloutSpec(model=sys.argv[1], scientist="policy", lab_manager="scripted",
                   sampling=SamplingConfig(max_new_tokens=8), max_rounds=1)
backend = RayBackend(spec, RayPool(session_record=Path(sys.argv[2])))
print("ready", flush=True)
time.sleep(600)
"""


def test_killed_driver_ray_session_is_cleaned_by_next_start(policy_wide_model_dir: Path, tmp_path: Path) -> None:
    from training.cluster.ray_session import clean_stale_session, session_processes

    record = tmp_path / "ray_session.json"
    proc = subprocess.Popen([sys.executable, "-c", DRIVER, str(policy_wide_model_dir), str(record)],
                            env={**_env(), "RAY_AUTH_MODE": "disabled"}, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        info = json.loads(record.read_text())
        assert info["driver_pid"] == proc.pid
        assert len(session_processes(info["session_name"], info["raylet_pid"])) >= 5, "Ray's processes not found"
        assert clean_stale_session(record) == []  # its driver is alive: left alone
    finally:
        proc.kill()
        proc.wait(timeout=60)
    left = session_processes(info["session_name"], info["raylet_pid"])  # at once: agents, raylet, ...
    assert left, "no process of the session was found right after the driver died"
    killed = clean_stale_session(record)  # what the next run's backend does first
    assert killed, "the cleanup found nothing to kill"
    deadline = time.time() + 30
    while session_processes(info["session_name"], info["raylet_pid"]) and time.time() < deadline:
        time.sleep(0.2)
    assert session_processes(info["session_name"], info["raylet_pid"]) == []
    assert not record.exists()


# -- a real Ray training run: a worker killed mid-run, then Ctrl-C to the whole process group ----------
def _descendants(root: int) -> list[int]:
    """Pids of every process below ``root`` (Ray's raylet and workers are below the driver)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _rollout_workers(driver: int) -> list[int]:
    pids = []
    for pid in _descendants(driver):
        try:
            if b"RolloutWorker" in Path(f"/proc/{pid}/cmdline").read_bytes():
                pids.append(pid)
        except OSError:
            pass
    return pids


def test_ray_training_survives_a_killed_worker_and_ctrl_c(policy_wide_model_dir: Path, tmp_path: Path) -> None:
    """``replicalab train`` on 2 Ray workers: SIGKILL one worker after the first step, then Ctrl-C the
    whole process group (as a terminal does) after the second; exit 130, no Ray process left, and
    ``--resume`` finishes with exactly the configured episodes per step, each logged once."""
    from training.cluster.ray_session import session_processes

    steps, per_step = RESUME_STEPS, 4
    args = ["--config", TRAIN_CFG, *resume_overrides(policy_wide_model_dir, tmp_path, "ray"),
            "rollout.backend=ray", "rollout.num_workers=2", "grpo.groups_per_step=2"]
    run = tmp_path / "ray"
    proc = subprocess.Popen([sys.executable, "-m", "training.cli", "train", *args], cwd=REPO, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    _wait_for(lambda: _trained_steps(run) >= 1 and len(_rollout_workers(proc.pid)) == 2, proc, "the first step")
    recorded = json.loads((run / "ray_session.json").read_text())
    session, raylet = recorded["session_name"], recorded["raylet_pid"]
    victim = _rollout_workers(proc.pid)[0]
    os.kill(victim, signal.SIGKILL)
    _wait_for(lambda: _trained_steps(run) >= 2, proc, "the step after the kill")
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=FAULT_WAIT_S)
    assert proc.returncode == 130, err[-3000:]
    assert f"pid {victim}) died" in err and ("re-running" in err or "while loading weights" in err), err[-3000:]
    assert "continue with:" in err.strip().splitlines()[-1]
    deadline = time.time() + 30
    while session_processes(session, raylet) and time.time() < deadline:
        time.sleep(0.2)
    assert session_processes(session, raylet) == [], "Ray processes outlived the interrupted run"
    resumed = subprocess.run([sys.executable, "-m", "training.cli", "train", *args, "--resume"], cwd=REPO,
                             env=_env(), capture_output=True, text=True, timeout=FAULT_WAIT_S)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    rows = [json.loads(line) for line in (run / "episodes.jsonl").read_text().splitlines()]
    by_step = {s: [r for r in rows if r["step"] == s] for s in range(steps)}
    assert sorted({r["step"] for r in rows}) == list(range(steps))
    assert all(len(v) == per_step for v in by_step.values()), {s: len(v) for s, v in by_step.items()}
    keys = [(r["step"], r["log"]["episode_id"], i) for s, v in by_step.items() for i, r in enumerate(v)]
    assert len(set(keys)) == steps * per_step
    metric_steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()
                    if '"rollout/episodes_total"' in line]
    assert metric_steps == list(range(steps))
