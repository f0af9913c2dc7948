"""Rollouts a step ahead of the learner (``rollout.max_staleness``) and the per-token truncated importance
correction.  The slow tests train a tiny model on one Ray worker: a staleness-1 run overlaps play and learning and
stays within the bound; one resumed from a checkpoint ends exactly like the uninterrupted run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from resume_runs import RESUME_TINY, TRAIN_CFG, assert_same_run, comparable_rows


def test_the_rollout_correction_weighs_each_model_token_by_its_truncated_ratio():
    import torch

    from training.trainer.grpo_maths import correction_sums, rollout_correction

    trainer = torch.tensor([[-1.0, -2.0, -0.5], [-1.0, -1.0, -1.0], [-3.0, -0.1, -0.2]])
    rollout = torch.tensor([[-1.0, -2.0, -0.5], [-1.2, -1.1, -9.0], [-0.1, -0.1, -0.2]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 1, 1]])  # the last token of row 2 is the environment's
    weights = rollout_correction(rollout, trainer, mask, clip=1.2)
    want = [[1.0, 1.0, 1.0], [1.2, float(np.exp(0.1)), 1.0], [float(np.exp(-2.9)), 1.0, 1.0]]
    assert weights.tolist() == [pytest.approx(row) for row in want]  # exp(0.2) > 1.2 is clipped; env tokens: 1
    total, clipped, n = correction_sums(weights, mask, clip=1.2)
    assert n == 8 and clipped == 1 and total == pytest.approx(5 + 1.2 + np.exp(0.1) + np.exp(-2.9))
    assert rollout_correction(rollout, rollout, mask, clip=2.0).tolist() == [[1.0] * 3] * 3  # on-policy: no change


def test_the_next_prompts_move_on_by_the_steps_groups():
    from training.trainer.rollouts_ahead import RolloutsAhead

    ahead = RolloutsAhead([f"row{i}" for i in range(6)])
    assert ahead.next_prompts(["row0", "row0", "row1", "row1"]) == ["row2", "row2", "row3", "row3"]
    assert ahead.next_prompts(["row3", "row2", "row3", "row2"]) == ["row5", "row4", "row5", "row4"]  # order kept
    assert ahead.next_prompts(["row4", "row4", "row5", "row5"]) is None  # past the last row: nothing ahead
    assert ahead.next_prompts(["other", "other"]) is None


def test_records_older_than_the_bound_are_refused():
    from replicalab.agents import NaiveScientist
    from replicalab.env import ReplicaLabEnv
    from replicalab.episode import run_episode
    from training.rollout.records import EpisodeJob, RolloutRecord
    from training.trainer.rollouts_ahead import check_staleness, staleness_metrics

    job = EpisodeJob(job_id=0, seed=1, template="cell_biology", difficulty="easy", role="scientist")
    log = run_episode(ReplicaLabEnv(max_rounds=1), NaiveScientist(), seed=1, template="cell_biology",
                      difficulty="easy")
    records = [RolloutRecord(job=job, log=log, trajectory=None, weights_version=v,
                             timing={"total_s": 2.0, "started_at": 100.0}) for v in (4, 5)]
    check_staleness(records, 5, 1)
    with pytest.raises(RuntimeError, match=r"weights versions \[4, 5\] \(rollout.max_staleness=0"):
        check_staleness(records, 5, 0)
    with pytest.raises(RuntimeError, match="refusing to train"):
        check_staleness(records, 6, 1)
    with pytest.raises(RuntimeError):  # weights newer than the step: a bug, never trained on
        check_staleness(records, 3, 1)
    metrics = staleness_metrics(records, 5, fetch_began_at=101.5)
    assert metrics == {"rollout/staleness_mean": 0.5, "rollout/staleness_max": 1.0, "time/play_s": 2.0,
                       "time/overlap_s": 1.5}


def test_staleness_config_is_checked_in_one_line():
    from pydantic import ValidationError

    from training.config.train import load_train_config

    assert load_train_config(TRAIN_CFG, ["rollout.max_staleness=1"]).rollout.max_staleness == 1
    for overrides, message in [
        (["rollout.backend=inprocess", "rollout.max_staleness=1"], "needs rollout.backend=ray|set rollout.backend=ray"),
        (["rollout.max_staleness=1", "grpo.num_iterations=2"], "needs grpo.num_iterations=1"),
        (["rollout.max_staleness=1", "rollout.vllm.sleep_between_steps=true"], "sleep_between_steps needs rollout"),
        (["rollout.max_staleness=2"], "less than or equal to 1"),
        (["rollout.max_staleness=-1"], "greater than or equal to 0"),
    ]:
        with pytest.raises((ValidationError, ValueError), match=message):
            load_train_config(TRAIN_CFG, overrides)


# -- training runs on one Ray worker (slow) ----------------------------------------------------------------
AHEAD_TINY = [o for o in RESUME_TINY if not o.startswith("rollout.backend")] + [
    "rollout.backend=ray", "rollout.num_workers=1", "rollout.max_staleness=1"]


def _rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _per_step(rows: list[dict], key: str) -> dict[int, float]:
    return {r["step"]: r[key] for r in rows if key in r}


@pytest.mark.slow
def test_a_staleness_one_run_overlaps_play_and_learning_within_the_bound(ray_cluster, policy_wide_model_dir: Path,
                                                                          tmp_path: Path):
    from training.config.train import load_train_config
    from training.trainer.run import run_train

    steps = 4
    cfg = load_train_config(TRAIN_CFG, [*AHEAD_TINY, "grpo.groups_per_step=2", "checkpoint.save_steps=100",
                                        f"grpo.max_steps={steps}", f"model={policy_wide_model_dir}",
                                        f"output_dir={tmp_path}", "run_name=ahead"])
    summary = run_train(cfg)
    assert summary["steps"] == steps and summary["episodes"] == steps * 4
    rows = _rows(cfg.run_dir)
    lag = _per_step(rows, "rollout/staleness_max")
    assert lag == {0: 0.0, 1: 1.0, 2: 1.0, 3: 1.0}  # step 0 on-policy, then one step behind, never more
    assert _per_step(rows, "rollout/staleness_mean") == lag
    later = range(1, steps)
    overlap = _per_step(rows, "time/overlap_s")
    assert all(overlap[s] > 0 for s in later), overlap  # each batch was being played before its step asked for it
    wait, sync, play = (_per_step(rows, k) for k in ("time/rollout_s", "time/weight_sync_s", "time/play_s"))
    # step time = sync + wait + learn; played synchronously, the wait alone would be at least the play time
    assert sum(wait[s] + sync[s] for s in later) < sum(play[s] for s in later), (wait, sync, play)
    weights = _per_step(rows, "rollout_correction/mean")
    assert len(weights) == steps and all(np.isfinite(list(weights.values())))
    assert all(0.0 <= r["rollout_correction/clipped"] <= 1.0 for r in rows if "rollout_correction/clipped" in r)


@pytest.mark.slow
@pytest.mark.parametrize("group_by", ["episode", "turn"])
def test_a_staleness_one_run_resumes_exactly(ray_cluster, policy_wide_model_dir: Path, tmp_path: Path, group_by: str):
    from training.config.train import load_train_config
    from training.trainer.rollouts_ahead import AHEAD_FILE
    from training.trainer.run import run_train

    def config(where: str):
        return load_train_config(TRAIN_CFG, [*AHEAD_TINY, "grpo.max_steps=4", f"model={policy_wide_model_dir}",
                                             f"output_dir={tmp_path / where}", "run_name=ahead",
                                             f"grpo.group_by={group_by}"])

    reference = config("reference")
    run_train(reference)
    checkpoints = reference.checkpoints_dir
    assert (checkpoints / "checkpoint-2" / AHEAD_FILE).is_file()  # step 2's batch, played with step 1's weights
    assert not (checkpoints / "checkpoint-4" / AHEAD_FILE).exists()  # nothing left to play after the last step
    resumed = config("resumed")
    shutil.copytree(reference.run_dir, resumed.run_dir)
    shutil.rmtree(resumed.run_dir / "final")
    for step in (3, 4):
        shutil.rmtree(resumed.checkpoints_dir / f"checkpoint-{step}")
    summary = run_train(resumed, resume=True)
    assert summary["resumed_from"].endswith("checkpoint-2")
    assert_same_run(resumed.run_dir, reference.run_dir)
    lag = {r["step"]: r["rollout/staleness_max"] for r in comparable_rows(resumed.run_dir / "metrics.jsonl")
           if "rollout/staleness_max" in r}
    assert lag == {0: 0.0, 1: 1.0, 2: 1.0, 3: 1.0}  # the resumed step 2 trained on the saved batch
    kinds = [r for r in comparable_rows(resumed.run_dir / "metrics.jsonl") if "branch/with_variance" in r]
    assert len(kinds) == 4 and all(("branch/groups/episode" in r) == (group_by == "episode") for r in kinds)
