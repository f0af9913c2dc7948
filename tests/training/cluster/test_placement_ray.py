"""A real local Ray with 8 logical GPUs (slow): the plan reserved in a placement group, actors placed on the
planned GPUs, fractional workers, and refusals when GPUs are missing or held elsewhere."""

from __future__ import annotations

import pytest

from training.cluster.plan import plan_placement
from training.cluster.plan_table import render_plan
from training.cluster.resources import ClusterResources
from training.config.train import load_train_config
from training.errors import UserInputError

@pytest.fixture(scope="module")
def ray_8_gpus():
    """A local Ray whose node advertises 8 logical GPUs (no device needed): Ray assigns GPU ids and sets
    CUDA_VISIBLE_DEVICES for actors exactly as on a GPU node."""
    ray = pytest.importorskip("ray")
    import os

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2, num_gpus=8, include_dashboard=False, logging_level="WARNING")
    yield ray
    ray.shutdown()


def _probe_actor(ray):
    @ray.remote
    class Probe:
        def where(self) -> tuple[list[str], list[int], str]:
            import os

            ctx = ray.get_runtime_context()
            return ctx.get_accelerator_ids()["GPU"], ray.get_gpu_ids(), os.environ.get("CUDA_VISIBLE_DEVICES", "")

    return Probe


def _wait_gpus_free(ray, expected: float, timeout_s: float = 20.0) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while ray.available_resources().get("GPU", 0.0) < expected and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ray.available_resources().get("GPU", 0.0) == expected


@pytest.mark.slow
def test_ray_placement_group_puts_workers_on_planned_gpus(ray_8_gpus, monkeypatch: pytest.MonkeyPatch) -> None:
    from training.cluster.placement_group import make_placement_group

    ray = ray_8_gpus
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    cluster = ClusterResources.from_ray()
    assert (cluster.gpus, cluster.nodes, cluster.cpus) == (8, 1, 2.0)
    cfg = load_train_config(None, ["device=cuda", "rollout.num_workers=7", "placement.cpus_per_worker=0.25"])
    plan = plan_placement(cfg, cluster, param_count=None, dtype_bytes=2)
    print("\n" + render_plan(plan))
    placed = make_placement_group(plan)
    probe = _probe_actor(ray)
    actors = []
    try:
        assert placed.trainer_gpu_ids == ("0",)
        actors = [probe.options(**placed.worker_options(i)).remote() for i in range(7)]
        seen = ray.get([a.where.remote() for a in actors])
        for worker, (accelerators, gpu_ids, visible) in zip(plan.workers, seen):
            assert accelerators == [str(d) for d in worker.gpus] == visible.split(",")
            assert [int(i) for i in gpu_ids] == list(worker.gpus)
        assert sorted(int(s[0][0]) for s in seen) == list(range(1, 8))  # GPU 0 is the learner's
        # a replacement worker reuses its slot's bundle: the same GPU
        ray.kill(actors[3], no_restart=True)
        actors[3] = probe.options(**placed.worker_options(3)).remote()
        assert ray.get(actors[3].where.remote())[0] == [str(d) for d in plan.workers[3].gpus]
    finally:
        for actor in actors:
            ray.kill(actor, no_restart=True)
        placed.remove()
    _wait_gpus_free(ray, 8.0)


@pytest.mark.slow
def test_ray_fractional_workers_share_gpus_and_learner_holds_two(ray_8_gpus, monkeypatch) -> None:
    from training.cluster.placement_group import make_placement_group

    ray = ray_8_gpus
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    cfg = load_train_config(None, ["device=cuda", "rollout.num_workers=4", "placement.trainer_gpus=2",
                                   "placement.gpus_per_worker=0.5", "placement.cpus_per_worker=0.25"])
    plan = plan_placement(cfg, ClusterResources.from_ray(), param_count=None, dtype_bytes=2, learner_processes=2)
    assert [w.gpus for w in plan.workers] == [(2,), (2,), (3,), (3,)]
    placed = make_placement_group(plan)
    probe = _probe_actor(ray)
    actors = []
    try:
        assert sorted(placed.trainer_gpu_ids) == ["0", "1"]
        actors = [probe.options(**placed.worker_options(i)).remote() for i in range(4)]
        seen = [s[0] for s in ray.get([a.where.remote() for a in actors])]
        assert seen == [[str(d) for d in w.gpus] for w in plan.workers]
        assert ray.available_resources().get("GPU", 0.0) == 4.0  # 2 learner + 2 shared by 4 workers
    finally:
        for actor in actors:
            ray.kill(actor, no_restart=True)
        placed.remove()
    _wait_gpus_free(ray, 8.0)


@pytest.mark.slow
def test_ray_placement_timeout_names_missing_resources(ray_8_gpus, monkeypatch) -> None:
    from training.cluster.placement_group import make_placement_group

    ray = ray_8_gpus
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    squatter = _probe_actor(ray).options(num_gpus=7, num_cpus=0).remote()
    try:
        ray.get(squatter.where.remote())
        cfg = load_train_config(None, ["device=cuda", "rollout.num_workers=7", "placement.cpus_per_worker=0.25",
                                       "placement.max_wait_s=1"])
        plan = plan_placement(cfg, ClusterResources(gpus=8, cpus=2), param_count=None, dtype_bytes=2)
        with pytest.raises(UserInputError) as info:
            make_placement_group(plan)
        message = str(info.value)
        print("\n" + message)
        assert "\n" not in message and "in 1s" in message and "missing 7 GPU" in message
        assert "1/8 GPU" in message and "ray status" in message
    finally:
        ray.kill(squatter, no_restart=True)
    _wait_gpus_free(ray, 8.0)


@pytest.mark.slow
def test_ray_learner_gpus_held_elsewhere_is_refused(ray_8_gpus, monkeypatch) -> None:
    """Another actor holds GPU 0, which the learner (cuda:0) would use: the group is refused, not reserved."""
    from training.cluster.placement_group import make_placement_group

    ray = ray_8_gpus
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    squatter = _probe_actor(ray).options(num_gpus=1, num_cpus=0).remote()
    try:
        assert ray.get(squatter.where.remote())[0] == ["0"]
        cfg = load_train_config(None, ["device=cuda", "rollout.num_workers=2", "placement.cpus_per_worker=0.25"])
        plan = plan_placement(cfg, ClusterResources(gpus=8, cpus=2), param_count=None, dtype_bytes=2)
        with pytest.raises(UserInputError) as info:
            make_placement_group(plan)
        message = str(info.value)
        assert "\n" not in message and "Ray GPU ids ['1']" in message and "uses ['0']" in message
        _wait_gpus_free(ray, 7.0)  # the refused group was given back
    finally:
        ray.kill(squatter, no_restart=True)
    _wait_gpus_free(ray, 8.0)
