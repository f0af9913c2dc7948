"""The rollout contract: a spec stores the sampling once, a collect carries only what changes per step."""

from __future__ import annotations

import inspect

import pytest

from training.config.model import SamplingConfig
from training.rollout.contract import RolloutSpec, check_complete
from training.rollout.play import row_seed
from training.rollout.records import EpisodeJob

SAMPLING = SamplingConfig(temperature=0.7, max_new_tokens=32)


def test_a_spec_reseeds_its_sampling_per_collect_and_every_turn_has_a_stream_of_its_own() -> None:
    spec = RolloutSpec(model="m", scientist="policy", lab_manager="scripted", sampling=SAMPLING)
    assert spec.shard_sampling(None) is SAMPLING
    seeds = [5, 6, 7]
    turns = {row_seed(s, job, role, turn) for s in seeds for job in range(40) for role in ("scientist", "lab_manager")
             for turn in range(12)}
    assert len(turns) == 3 * 40 * 2 * 12  # no two turns of a collect, or of three collects, share a stream
    reseeded = [spec.shard_sampling(s) for s in seeds]
    assert [s.seed for s in reseeded] == seeds
    assert all(s.model_copy(update={"seed": None}) == SAMPLING for s in reseeded)  # only the seed changes
    assert spec.sampling is SAMPLING  # the spec itself never changes


@pytest.mark.parametrize("scientist,lab_manager,frozen", [
    ("policy", "scripted", ()),
    ("model:a", "policy", ("model:a",)),
    ("model:a", "model:a", ("model:a",)),
    ("model:a", "model:b", ("model:a", "model:b")),
    ("scripted:naive", "policy", ()),
])
def test_the_frozen_opponents_are_the_model_seats(scientist: str, lab_manager: str, frozen: tuple) -> None:
    spec = RolloutSpec(model="m", scientist=scientist, lab_manager=lab_manager, sampling=SAMPLING)
    assert spec.frozen == frozen and spec.seats == {"scientist": scientist, "lab_manager": lab_manager}


def test_only_the_spec_stores_sampling() -> None:
    """Policies take the sampling of each call; a worker's collect takes the jobs and a seed, nothing else."""
    from training.rollout.policy import PolicyModel
    from training.rollout.worker import RolloutWorkerImpl

    assert "sampling" not in inspect.signature(PolicyModel.__init__).parameters
    for method in (PolicyModel.generate, PolicyModel.generate_ids, PolicyModel.prompt_budget):
        param = inspect.signature(method).parameters["sampling"]
        assert param.default is inspect.Parameter.empty, method  # no stored fallback to pick silently
    def own(fn) -> list[str]:  # Ray adds a tracing parameter to an actor class's methods
        return [p for p in inspect.signature(fn).parameters if not p.startswith("_ray")]

    assert own(RolloutWorkerImpl.collect) == ["self", "jobs", "seed"]
    assert own(RolloutWorkerImpl.__init__) == ["self", "spec", "name", "torch_threads"]


def test_records_come_back_complete_and_in_job_order() -> None:
    from training.rollout.records import RolloutRecord

    jobs = [EpisodeJob(job_id=i, seed=i, template="cell_biology", difficulty="easy", role="scientist")
            for i in (3, 1, 2)]

    def record(job: EpisodeJob) -> RolloutRecord:
        return RolloutRecord(job=job, log=None, trajectory=None)  # type: ignore[arg-type]

    by_id = {job.job_id: record(job) for job in jobs}
    assert [r.job for r in check_complete(jobs, by_id)] == jobs
    with pytest.raises(AssertionError, match="missing"):
        check_complete(jobs, {k: v for k, v in by_id.items() if k != 1})
    with pytest.raises(AssertionError, match="different job"):
        check_complete(jobs, {**by_id, 1: record(jobs[0])})
