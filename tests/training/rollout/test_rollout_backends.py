"""Rollout backends: in-process and Ray produce every job once, in order; weights sync; worker faults.

The Ray tests share one session-scoped Ray (``num_cpus=2``) and create backends one after another
(each worker reserves one CPU), so keep at most two Ray workers alive at a time.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

from replicalab import DIFFICULTIES, TEMPLATES, TRAIN_SEEDS  # noqa: E402
from training.config.model import SamplingConfig  # noqa: E402
from training.rollout.backends import make_backend  # noqa: E402
from training.rollout.contract import RolloutSpec, shard_jobs  # noqa: E402
from training.rollout.inprocess import InProcessBackend  # noqa: E402
from training.rollout.ray_backend import RayBackend, RayPool  # noqa: E402
from training.rollout.records import EpisodeJob, RolloutRecord  # noqa: E402

#: Short completions keep every generation step cheap with the tiny model.
ROLLOUT_SAMPLING = SamplingConfig(max_new_tokens=24, seed=0)
ROLLOUT_MAX_ROUNDS = 3
#: GRPO group size of the test jobs.
ROLLOUT_GROUP = 2
SEATS = dict(scientist="policy", lab_manager="scripted")


def rollout_jobs(n: int, role: str = "scientist") -> list[EpisodeJob]:
    """``n`` jobs in GRPO groups of ``ROLLOUT_GROUP`` (same seed, template, difficulty per group)."""
    jobs = []
    for i in range(n):
        g = i // ROLLOUT_GROUP
        jobs.append(EpisodeJob(job_id=100 + i, seed=TRAIN_SEEDS[g], template=TEMPLATES[g % len(TEMPLATES)],
                               difficulty=DIFFICULTIES[g % len(DIFFICULTIES)], role=role, group=g))  # type: ignore[arg-type]
    return jobs


def check_records(jobs: list[EpisodeJob], records: list[RolloutRecord], version: int = 0) -> None:
    """One record per job in job order; consistent, small, picklable trajectories."""
    assert [r.job for r in records] == jobs
    for rec in records:
        assert rec.weights_version == version
        traj = rec.trajectory
        assert traj is not None and traj.role == rec.job.role
        assert len(traj.completion_ids) == len(traj.logprobs) == len(traj.env_mask) > 0
        assert all(type(t) is int for t in traj.prompt_ids + traj.completion_ids)
        assert all(type(p) is float for p in traj.logprobs)
        assert set(traj.env_mask) <= {0, 1}
        assert traj.reward == rec.log.role_rewards[rec.job.role]  # each seat learns from its own role's reward


def modified_state(state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The same weights, visibly changed (deterministic)."""
    return {k: (v + np.float32(0.01) * np.sign(v + 1e-3)).astype(np.float32) for k, v in state.items()}


def rollout_spec(model_dir: Path, **seats) -> RolloutSpec:
    return RolloutSpec(model=str(model_dir), **{**SEATS, **seats}, sampling=ROLLOUT_SAMPLING,
                       max_rounds=ROLLOUT_MAX_ROUNDS)


def ray_backend(model_dir: Path, num_workers: int, **pool) -> RayBackend:
    return RayBackend(rollout_spec(model_dir), RayPool(num_workers=num_workers, **pool))


# -- sharding (no Ray) ---------------------------------------------------------------------------
def test_shard_jobs_contiguous_balanced_and_keeps_groups() -> None:
    jobs = rollout_jobs(16)
    shards = shard_jobs(jobs, 2)
    assert [j for s in shards for j in s] == jobs and [len(s) for s in shards] == [8, 8]
    assert not {j.group for j in shards[0]} & {j.group for j in shards[1]}
    assert [len(s) for s in shard_jobs(rollout_jobs(10), 2)] == [4, 6]  # not 5/5: groups of 2 stay whole
    one_group = [EpisodeJob(i, 1, TEMPLATES[0], "easy", "scientist", group=0) for i in range(8)]
    assert [len(s) for s in shard_jobs(one_group, 2)] == [4, 4]  # balance wins over one big group
    assert [len(s) for s in shard_jobs(rollout_jobs(1), 3)] == [1]
    assert shard_jobs([], 2) == []


# -- in-process ----------------------------------------------------------------------------------
def test_inprocess_backend_every_job_in_order(policy_wide_model_dir: Path) -> None:
    backend = make_backend("inprocess", rollout_spec(policy_wide_model_dir), torch_threads=1)
    jobs = rollout_jobs(4)
    check_records(jobs, backend.collect(jobs))
    first, again = backend.collect(jobs, sampling_seed=3), backend.collect(jobs, sampling_seed=3)
    assert [r.trajectory for r in first] == [r.trajectory for r in again]
    backend.set_weights(modified_state(backend.policy.state_numpy()), 7)
    with pytest.raises(ValueError):
        backend.collect(jobs + jobs[:1])  # duplicate job ids
    records = backend.collect(jobs[:2])
    check_records(jobs[:2], records, version=7)
    assert all(r.worker == "inprocess" for r in records)
    lab_jobs = rollout_jobs(2, role="lab_manager")
    lab = InProcessBackend(rollout_spec(policy_wide_model_dir, scientist="scripted:naive", lab_manager="policy"))
    check_records(lab_jobs, lab.collect(lab_jobs))
    backend.close()
    lab.close()


# -- Ray -----------------------------------------------------------------------------------------
@pytest.mark.slow  # starts Ray
def test_ray_one_worker_every_job_in_order(ray_cluster: None, policy_wide_model_dir: Path) -> None:
    backend = ray_backend(policy_wide_model_dir, 1)
    try:
        jobs = rollout_jobs(5)
        records = backend.collect(jobs)
        check_records(jobs, records)
        assert {r.worker for r in records} == {"ray-0"} and backend.restarts == 0
        assert backend.collect([]) == []
    finally:
        backend.close()


@pytest.fixture(scope="module")
def two_workers(ray_cluster: None, policy_wide_model_dir: Path) -> Iterator[RayBackend]:
    backend = ray_backend(policy_wide_model_dir, 2)
    yield backend
    backend.close()


@pytest.mark.slow  # starts Ray
def test_ray_two_workers_every_job_in_order(two_workers: RayBackend) -> None:
    jobs = rollout_jobs(8)
    records = two_workers.collect(jobs)
    check_records(jobs, records, version=two_workers.version)
    assert {r.worker for r in records} == {"ray-0", "ray-1"}


@pytest.mark.slow  # starts Ray
def test_ray_weights_sync(two_workers: RayBackend, policy_wide_model_dir: Path) -> None:
    from training.rollout.policy import PolicyModel

    driver = PolicyModel(str(policy_wide_model_dir), device="cpu")
    original = {k: v.copy() for k, v in driver.state_numpy().items()}  # state_numpy views the live weights
    driver.load_state(modified_state(original), 7)
    two_workers.set_weights(driver.state_numpy(), 7)
    jobs = rollout_jobs(4)
    check_records(jobs, two_workers.collect(jobs), version=7)
    mine = driver.state_numpy()
    for theirs in two_workers.worker_states():
        assert theirs.keys() == mine.keys()
        assert all(np.array_equal(theirs[k], mine[k]) for k in mine)
        assert not all(np.array_equal(theirs[k], original[k]) for k in mine)


@pytest.mark.slow  # starts Ray
def test_ray_killed_worker_is_replaced_and_its_shard_rerun(two_workers: RayBackend) -> None:
    """ray.kill a worker from another thread while its shard is in flight (generation slowed so the
    kill lands mid-collect); every job still comes back exactly once, played with the current weights
    (the replacement loads them), identical to an undisturbed collect with the same sampling seed."""
    import ray

    state = modified_state(two_workers.worker_states()[0])
    two_workers.set_weights(state, 11)
    jobs = rollout_jobs(8)
    undisturbed = two_workers.collect(jobs, sampling_seed=5)
    before = two_workers.restarts
    victim = two_workers.workers[1]
    ray.get(victim.inject_fault.remote(delay_s=1.0))
    killer = threading.Timer(0.5, lambda: ray.kill(victim, no_restart=True))
    started = time.perf_counter()
    killer.start()
    records = two_workers.collect(jobs, sampling_seed=5)
    killer.join()
    assert time.perf_counter() - started > 0.5
    check_records(jobs, records, version=11)
    assert len({r.job.job_id for r in records}) == len(jobs)
    assert two_workers.restarts - before == 1
    # the re-run shard replays the same seeded episodes: the fault changed nothing
    assert [r.trajectory for r in records] == [r.trajectory for r in undisturbed]
    assert two_workers.workers[1] is not victim
    for theirs in two_workers.worker_states():
        assert all(np.array_equal(theirs[k], state[k]) for k in state)


@pytest.mark.slow  # starts Ray
def test_ray_gives_up_after_max_restarts(two_workers: RayBackend) -> None:
    """A worker process that exits after playing its shard (results lost) counts as a failure; with
    max_restarts=0 the collect raises, and the pool is whole again for the next collect."""
    import ray

    before = two_workers.restarts
    two_workers.max_restarts = 0
    try:
        ray.get(two_workers.workers[0].inject_fault.remote(crash=True))
        jobs = rollout_jobs(6)
        with pytest.raises(RuntimeError, match="gave up"):
            two_workers.collect(jobs)
        assert two_workers.restarts - before == 1
        check_records(jobs, two_workers.collect(jobs), version=two_workers.version)
    finally:
        two_workers.max_restarts = 3


# -- bench (in-process part only) ----------------------------------------------------------------
@pytest.mark.slow
def test_bench_bound_replays_the_same_generation(policy_wide_model_dir: Path) -> None:
    """The bound replays the rollout's own generation calls: same prompts, so the same tokens."""
    from training.bench.rollout import format_bench_rollout, run_bench_rollout

    result = run_bench_rollout(str(policy_wide_model_dir), episodes=3, max_new_tokens=8, max_rounds=2,
                               ray_workers=(), repeats=1)
    assert result["bound"]["tokens"] == result["inprocess"]["tokens"] > 0
    assert result["generate_calls"] >= 1 and "inprocess" in format_bench_rollout(result)


@pytest.mark.slow  # starts Ray
def test_bench_two_worker_bound_replays_both_halves_at_once(ray_cluster: None, policy_wide_model_dir: Path) -> None:
    """``bound x2`` replays the recorded calls split in two processes: the same tokens as the bound."""
    from training.bench.rollout import ParallelBound, _Recorder, _replay, bench_jobs
    from training.config.model import SamplingConfig

    sampling = SamplingConfig(do_sample=False, max_new_tokens=8)
    spec = RolloutSpec(model=str(policy_wide_model_dir), scientist="policy", lab_manager="scripted", sampling=sampling,
                       max_rounds=2)
    backend = InProcessBackend(spec, torch_threads=1)
    try:
        with _Recorder(backend.policy) as rec:
            backend.collect(bench_jobs(4))
        _, tokens = _replay(backend.policy, rec.calls)
    finally:
        backend.close()
    bound = ParallelBound(str(policy_wide_model_dir), rec.calls)
    try:
        seconds, parallel_tokens = bound.once()
        assert len(set(bound.pids)) == 2 and os.getpid() not in bound.pids
    finally:
        bound.close()
    assert parallel_tokens == tokens > 0 and seconds > 0
