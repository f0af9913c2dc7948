"""Branch groups: G replies from one replayed decision state, each played on; per-turn sampling streams."""

from __future__ import annotations

from dataclasses import replace

import pytest

from training.config.model import SamplingConfig
from training.model.default import default_model_dir
from training.rollout.branch import (OTHER_TURN, REPAIR, BranchCollector, branch_metrics, branch_turn, choose_branch,
                                     role_turns)
from training.rollout.contract import RolloutSpec
from training.rollout.inprocess import InProcessBackend
from training.rollout.records import EpisodeJob

pytestmark = pytest.mark.slow

G = 3
SAMPLING = SamplingConfig(temperature=1.0, max_new_tokens=128)


@pytest.fixture(scope="module")
def backend():
    spec = RolloutSpec(model=str(default_model_dir()), scientist="policy", lab_manager="scripted", sampling=SAMPLING)
    b = InProcessBackend(spec, torch_threads=1)
    yield b
    b.close()


def _jobs(cells=(("cell_biology", "hard"), ("ml_benchmark", "medium")), seed0=11) -> list[EpisodeJob]:
    return [EpisodeJob(job_id=g * G + k, seed=seed0 + g, template=t, difficulty=d, role="scientist", group=g)
            for g, (t, d) in enumerate(cells) for k in range(G)]


@pytest.mark.parametrize("reply_only", [True, False])
def test_a_branch_group_replays_one_state_and_samples_its_own_replies(backend, reply_only: bool) -> None:
    collector = BranchCollector(backend, other_share=0.0, reply_only=reply_only)
    jobs = _jobs()
    records = collector.collect(jobs, sampling_seed=5)
    assert [r.job.job_id for r in records] == [j.job_id for j in jobs]
    for g, trunk in enumerate(collector.last_trunks):
        group = records[g * G:(g + 1) * G]
        k = branch_turn(group[0].job)
        assert {branch_turn(r.job) for r in group} == {k} and k < role_turns(trunk, "scientist")
        cut = len(group[0].job.prefix)
        assert all(r.model_turns[:cut] == trunk.model_turns[:cut] for r in group)  # the same state, token for token
        before = [t for t in trunk.log.turns][: 2 * k]
        for r in group:
            assert [t.action for t in r.log.turns[: 2 * k]] == [t.action for t in before]
            assert r.trajectory.prompt_ids == group[0].trajectory.prompt_ids  # the state is the prompt
            first = r.model_turns[cut]
            assert r.trajectory.completion_ids[: len(first.completion_ids)] == list(first.completion_ids)
            if reply_only:
                assert r.trajectory.completion_ids == list(first.completion_ids)
                assert r.trajectory.env_mask == [1] * len(first.completion_ids)
    again = BranchCollector(backend, other_share=0.0, reply_only=reply_only).collect(jobs, sampling_seed=5)
    assert [r.log for r in again] == [r.log for r in records]  # deterministic for the collect's seed
    metrics = branch_metrics(records)
    assert sum(v for k, v in metrics.items() if k.startswith("branch/groups/")) == 2
    assert 0.0 <= metrics["branch/with_variance"] <= 1.0


def test_an_episode_samples_the_same_alone_or_in_any_batch_and_turns_draw_independently(backend) -> None:
    jobs = _jobs(cells=(("cell_biology", "medium"), ("behavioral_psychology", "hard")), seed0=40)
    together = backend.collect(jobs, sampling_seed=9)
    alone = [backend.collect([job], sampling_seed=9)[0] for job in jobs[::2]]
    assert [r.log for r in alone] == [r.log for r in together[::2]]
    for a, b in zip(alone, together[::2]):  # the same tokens; log-probs equal up to the batch's float rounding
        assert a.trajectory.completion_ids == b.trajectory.completion_ids and a.trajectory.env_mask == b.trajectory.env_mask
        assert max(abs(x - y) for x, y in zip(a.trajectory.logprobs, b.trajectory.logprobs)) < 1e-4
    # a group's episodes differ (each job has its own streams), and a seat's turns are not copies of its first
    assert len({tuple(r.trajectory.completion_ids) for r in together}) > 1


def test_a_group_branches_at_a_skill_chance_when_its_trunk_has_one(backend) -> None:
    import random

    trunks = backend.collect([replace(j, job_id=i) for i, j in enumerate(_jobs(seed0=70)[::G])], sampling_seed=3)
    for trunk in trunks:
        n = role_turns(trunk, "scientist")
        for s in range(5):
            kind, turn = choose_branch(trunk, 0.0, random.Random(s))
            assert 0 <= turn < n and kind
        assert choose_branch(trunk, 1.0, random.Random(0))[0] in ("turn",) or n == 1


def test_branch_groups_on_two_ray_workers_equal_the_in_process_result(ray_cluster, backend) -> None:
    """A step's branch groups split across two Ray workers (a group's replies on different workers) play the same
    episodes, token for token, as in this process."""
    from training.rollout.ray_backend import RayBackend, RayPool

    jobs = _jobs(cells=(("behavioral_psychology", "hard"), ("cell_biology", "medium")), seed0=90)
    local = BranchCollector(backend, other_share=0.25, reply_only=True).collect(jobs, sampling_seed=21)
    ray = RayBackend(backend.spec, RayPool(num_workers=2))
    try:
        remote = BranchCollector(ray, other_share=0.25, reply_only=True).collect(jobs, sampling_seed=21)
    finally:
        ray.close()
    assert len({r.worker for r in remote}) == 2
    def branched(r):  # the branch point, token for token (log-probs differ by the batches' float rounding)
        return r.job.branch, [t.completion_ids for t in r.job.prefix]

    assert [branched(r) for r in remote] == [branched(r) for r in local]
    assert [r.log for r in remote] == [r.log for r in local]
    assert [r.trajectory.completion_ids for r in remote] == [r.trajectory.completion_ids for r in local]


def test_a_lab_manager_group_in_self_play_branches_at_one_of_its_own_turns() -> None:
    """Both seats are the policy: a Lab Manager group replays the trunk (every model turn of both seats) up to
    one of the Lab Manager's turns (a repair chance when the trunk has one), and its replies there are the Lab
    Manager's, each the whole trajectory."""
    from replicalab.lab_chances import repair_chances

    spec = RolloutSpec(model=str(default_model_dir()), scientist="policy", lab_manager="policy", sampling=SAMPLING)
    backend = InProcessBackend(spec, torch_threads=1)
    try:
        jobs = [replace(j, role="lab_manager") for j in _jobs(seed0=40)]
        collector = BranchCollector(backend, other_share=0.0, reply_only=True)
        records = collector.collect(jobs, sampling_seed=3)
        for g, trunk in enumerate(collector.last_trunks):
            group = records[g * G:(g + 1) * G]
            k = branch_turn(group[0].job)
            assert {branch_turn(r.job) for r in group} == {k} and k < role_turns(trunk, "lab_manager")
            chances = [t for t in repair_chances(trunk.log) if t < role_turns(trunk, "lab_manager")]
            assert group[0].job.branch == (REPAIR if chances else OTHER_TURN) and (k in chances or not chances)
            cut = len(group[0].job.prefix)
            assert {t.role for t in group[0].job.prefix} <= {"scientist", "lab_manager"}
            for r in group:
                assert r.model_turns[:cut] == trunk.model_turns[:cut] and r.model_turns[cut].role == "lab_manager"
                assert r.trajectory.prompt_ids == group[0].trajectory.prompt_ids
                assert r.trajectory.completion_ids == list(r.model_turns[cut].completion_ids)
        metrics = branch_metrics(records)
        assert metrics.get(f"branch/groups/{REPAIR}", 0) + metrics.get(f"branch/groups/{OTHER_TURN}", 0) == 2
    finally:
        backend.close()
