"""Opponent pools: the config, deterministic draws, snapshots (frozen, saved, restored) and rollouts that play them."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from replicalab import ReplicaLabEnv, run_episode
from replicalab.agents import SCIENTIST_FACTORIES
from replicalab.seeds import TRAIN_SEEDS
from training.config.pool import PoolMember, SnapshotConfig
from training.config.train import load_train_config
from training.rollout.records import EpisodeJob
from training.trainer.pool import OpponentPool

BASE = "configs/train/default.yaml"  # no pools of its own (the shipped self-play config has some)
SELFPLAY = ["seats.lab_manager=policy"]
POOL = ['seats.pools={"lab_manager": [{"seat": "policy", "weight": 2}, {"seat": "snapshot", "weight": 1}, '
        '{"seat": "scripted:cooperative", "weight": 1}]}', "seats.snapshots.every=2", "seats.snapshots.keep=2"]


def _pool(every: int = 2, keep: int = 2, seed: int = 0) -> OpponentPool:
    members = [PoolMember(seat="policy", weight=2), PoolMember(seat="snapshot", weight=1),
               PoolMember(seat="scripted:cooperative", weight=1)]
    return OpponentPool({"lab_manager": members}, SnapshotConfig(every=every, keep=keep), seed)


def test_a_pool_config_loads_and_names_what_it_loads():
    cfg = load_train_config(BASE, [*SELFPLAY, *POOL])
    assert [m.seat for m in cfg.seats.pools["lab_manager"]] == ["policy", "snapshot", "scripted:cooperative"]
    assert cfg.seats.pool_seats == ("policy", "scripted:cooperative")


@pytest.mark.parametrize("pools, extra, message", [
    ('{"lab_manager": []}', [], "seats.pools.lab_manager is empty"),
    ('{"lab_manager": [{"seat": "snapshot", "weight": 1}]}', [], "seats.snapshots.every is 0"),
    ('{"lab_manager": [{"seat": "scripted:naive", "weight": 1}]}', [], "is not a scripted agent here"),
    ('{"lab_manager": [{"seat": "policy", "weight": 0}]}', [], "greater than 0"),
    ('{"lab_manager": [{"seat": "policy", "weight": 1}, {"seat": "policy", "weight": 2}]}', [], "names a member twice"),
    ('{"scientist": [{"seat": "scripted:naive", "weight": 1}]}', ["seats.lab_manager=scripted"],
     "seats.lab_manager is not policy"),
])
def test_a_bad_pool_is_one_clear_error(pools, extra, message):
    from pydantic import ValidationError

    from training.config.loading import one_line

    with pytest.raises(ValidationError) as err:
        load_train_config(BASE, [*SELFPLAY, f"seats.pools={pools}", *extra])
    assert message in one_line(err.value) and "\n" not in one_line(err.value)


def test_draws_are_per_group_deterministic_and_follow_the_weights():
    pool = _pool()
    pool.take_snapshot(0, {"w": np.zeros(2, dtype=np.float32)})
    draws = [pool.opponent("scientist", step, group) for step in range(50) for group in range(8)]
    assert draws == [_pool_with_snapshot().opponent("scientist", s, g) for s in range(50) for g in range(8)]
    shares = Counter(draws)
    assert set(shares) == {"policy", "snapshot:0", "scripted:cooperative"}
    assert abs(shares["policy"] / len(draws) - 0.5) < 0.06 and abs(shares["snapshot:0"] / len(draws) - 0.25) < 0.06
    assert pool.opponent("lab_manager", 3, 1) == ""  # the Scientist has no pool: its seat plays
    jobs = [EpisodeJob(job_id=i, seed=TRAIN_SEEDS[i // 2], template="cell_biology", difficulty="hard",
                       role="scientist", group=i // 2) for i in range(8)]
    assigned = pool.assign(jobs, 7)
    assert all(a.opponent == b.opponent for a, b in zip(assigned[::2], assigned[1::2]))  # a group shares it
    metrics = pool.metrics(assigned)
    assert metrics["pool/snapshots_held"] == 1.0 and sum(v for k, v in metrics.items()
                                                         if k.startswith("pool/lab_manager/")) == pytest.approx(1.0)


def _pool_with_snapshot() -> OpponentPool:
    pool = _pool()
    pool.take_snapshot(0, {"w": np.ones(2, dtype=np.float32)})
    return pool


def test_snapshots_are_frozen_copies_taken_on_schedule_and_restored_from_a_checkpoint(tmp_path):
    pool = _pool(every=2, keep=2)
    live = {"w": np.arange(3, dtype=np.float32), "__lora_config__": '{"r": 4}'}
    taken = [step for step in range(7) if pool.take_snapshot(step, live)]
    assert taken == [0, 2, 4, 6] and sorted(pool.held) == [4, 6]  # the newest two
    live["w"] += 100.0  # training moves the live weights: the snapshots do not move with them
    assert pool.held[6]["w"].tolist() == [0.0, 1.0, 2.0]
    assert list(pool.snapshot_states()) == ["snapshot:4", "snapshot:6"]
    pool.save(tmp_path / "checkpoint-6")
    restored = _pool(every=2, keep=2)
    restored.load(tmp_path / "checkpoint-6")
    assert sorted(restored.held) == [4, 6] and restored.held[6]["w"].tolist() == [0.0, 1.0, 2.0]
    assert restored.held[6]["__lora_config__"] == '{"r": 4}'
    assert all(pool.opponent("scientist", 9, g) == restored.opponent("scientist", 9, g) for g in range(20))
    empty = _pool()
    empty.load(tmp_path / "no-checkpoint")
    assert empty.held == {}


def test_a_job_plays_its_drawn_opponent_in_the_other_seat():
    from training.config.model import SamplingConfig
    from training.rollout.play import play_jobs

    jobs = [EpisodeJob(job_id=i, seed=TRAIN_SEEDS[i], template="ml_benchmark", difficulty="medium", role="scientist",
                       group=i, opponent="scripted:cooperative" if i % 2 else "") for i in range(6)]
    records = play_jobs(None, jobs, scientist="scripted:naive", lab_manager="scripted:thrifty",
                        sampling=SamplingConfig(max_new_tokens=8))
    env = ReplicaLabEnv()
    for job, record in zip(jobs, records):
        lab = "cooperative" if job.opponent else "thrifty"
        expected = run_episode(env, SCIENTIST_FACTORIES["naive"](job.seed, job.template, job.difficulty), lab,
                               seed=job.seed, template=job.template, difficulty=job.difficulty)
        assert record.log == expected
    assert any(r.log != records[0].log for r in records)


def _snapshot_jobs(opponent: str) -> list[EpisodeJob]:
    return [EpisodeJob(job_id=i, seed=TRAIN_SEEDS[i], template="cell_biology", difficulty="easy", role="scientist",
                       group=i, opponent=opponent) for i in range(3)]


def _spec(model_dir):
    from training.config.model import SamplingConfig
    from training.rollout.contract import RolloutSpec

    return RolloutSpec(model=str(model_dir), scientist="policy", lab_manager="policy",
                       sampling=SamplingConfig(max_new_tokens=8, seed=0), max_rounds=2)


def test_a_snapshot_is_its_own_model_and_never_receives_the_live_weights(policy_wide_model_dir):
    from training.rollout.inprocess import InProcessBackend

    backend = InProcessBackend(_spec(policy_wide_model_dir))
    start = {k: v.copy() for k, v in backend.policy.state_numpy().items()}  # state_numpy views the live weights
    backend.set_snapshots({"snapshot:0": start})
    backend.set_weights({k: v + 0.25 for k, v in start.items()}, 1)
    frozen = backend.snapshots["snapshot:0"].state_numpy()
    assert all(np.array_equal(frozen[k], start[k]) for k in start)
    assert not all(np.array_equal(backend.policy.state_numpy()[k], start[k]) for k in start)
    against_snapshot = backend.collect(_snapshot_jobs("snapshot:0"), sampling_seed=3)
    against_live = backend.collect(_snapshot_jobs(""), sampling_seed=3)
    lab_text = [[t.raw_text or str(t.action) for t in r.log.turns if t.role == "lab_manager"] for r in against_snapshot]
    assert lab_text != [[t.raw_text or str(t.action) for t in r.log.turns if t.role == "lab_manager"]
                        for r in against_live]
    backend.set_snapshots({})
    assert backend.snapshots == {}


@pytest.mark.slow
def test_ray_workers_play_the_same_snapshot_episodes_as_the_driver(policy_wide_model_dir, ray_cluster):
    from training.rollout.inprocess import InProcessBackend
    from training.rollout.ray_backend import RayBackend, RayPool

    local = InProcessBackend(_spec(policy_wide_model_dir))
    start = {k: v.copy() for k, v in local.policy.state_numpy().items()}
    moved = {k: v + 0.25 for k, v in start.items()}
    remote = RayBackend(_spec(policy_wide_model_dir), RayPool(num_workers=1))
    try:
        for backend in (local, remote):
            backend.set_weights(moved, 1)
            backend.set_snapshots({"snapshot:0": start})
        got = remote.collect(_snapshot_jobs("snapshot:0"), sampling_seed=5)
        want = local.collect(_snapshot_jobs("snapshot:0"), sampling_seed=5)
        assert [r.log for r in got] == [r.log for r in want]
    finally:
        remote.close()


def test_every_trained_seat_is_validated_against_each_fixed_opponent():
    from training.config.model import SamplingConfig
    from training.rollout.play import play_jobs
    from training.rollout.records import validation_jobs
    from training.trainer.validation import seat_metrics

    opponents = {"scientist": ["scripted:thrifty", "scripted:cooperative"], "lab_manager": ["scripted:naive"]}
    jobs = validation_jobs(9, ["cell_biology", "ml_benchmark", "behavioral_psychology"], ["easy", "medium", "hard"],
                           opponents)
    assert [j.job_id for j in jobs] == list(range(27)) and len({j.group for j in jobs}) == 27
    assert [(j.role, j.opponent) for j in jobs[::9]] == [("scientist", "scripted:thrifty"),
                                                          ("scientist", "scripted:cooperative"),
                                                          ("lab_manager", "scripted:naive")]
    assert [(j.seed, j.template, j.difficulty) for j in jobs[:9]] == [(j.seed, j.template, j.difficulty)
                                                                        for j in jobs[9:18]]  # the same episodes
    # scripted stand-ins for the trained seats: a reader Scientist, a thrifty Lab Manager
    records = play_jobs(None, jobs, scientist="scripted:reader", lab_manager="scripted:thrifty",
                        sampling=SamplingConfig(max_new_tokens=8))
    metrics = seat_metrics(records)
    lab = [r.log.role_rewards["lab_manager"] for r in records[18:]]
    assert metrics["val/lab_manager/reward"] == pytest.approx(sum(lab) / len(lab))
    assert metrics["val/lab_manager/vs/scripted:naive/reward"] == metrics["val/lab_manager/reward"]
    assert metrics["val/scientist/vs/scripted:cooperative/reward"] > metrics["val/scientist/vs/scripted:thrifty/reward"]
    assert metrics["val/scientist/agreement_rate"] == 1.0 and metrics["val/scientist/parse_failure_rate"] == 0.0


def test_the_shipped_selfplay_config_draws_both_seats_opponents_from_pools():
    cfg = load_train_config("configs/train/selfplay.yaml")
    assert set(cfg.seats.pools) == {"scientist", "lab_manager"} and cfg.seats.snapshots.every > 0
    assert cfg.seats.trained_roles == ("scientist", "lab_manager")
    assert set(cfg.validation_opponents) == {"scientist", "lab_manager"}
