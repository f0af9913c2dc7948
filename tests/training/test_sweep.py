"""Sweeps on Ray Tune: Tune's search space and schedulers from the config, per-trial placement groups that never
oversubscribe (logical GPUs on CPU), early stopping recorded as stopped, an interrupted sweep resumed to the
same table as an uninterrupted one, and the report's figures drawing every trial."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from coin_model import COIN_OVERRIDES
from figures import legend, lines, saved_as, tick_labels

from training.config.loading import ConfigError
from training.config.sweep import SweepConfig, load_sweep_config

REPO = Path(__file__).resolve().parents[2]
#: Tiny trials of the coin model (its groups differ in reward by construction): a validation check every step.
TRIAL = ["grpo.groups_per_step=1", "grpo.num_generations=2", "rollout.backend=inprocess", "checkpoint.save_steps=1",
         "rollout.sampling.max_new_tokens=8", "grpo.max_completion_length=64", "validation.every_steps=1",
         "validation.episodes=2", "data.templates=[cell_biology]", "wandb.mode=disabled", "device=cpu",
         *COIN_OVERRIDES]
#: Seconds a sweep subprocess may take.
SWEEP_WAIT_S = 600


def sweep_config(model: Path, out: Path, steps: int, **fields) -> SweepConfig:
    overrides = [*TRIAL, f"model={model}", f"grpo.max_steps={steps}"]
    return SweepConfig(**{"name": "s", "base": str(REPO / "configs/train/default.yaml"), "overrides": overrides,
                          "search": {"grpo.learning_rate": [1e-5, 3e-2]}, "metric": "val/reward/mean",
                          "metric_window": 1, "out": str(out), "cpus_per_trial": 1.0, **fields})


# -- the config as Tune reads it (fast) -------------------------------------------------------------
def test_search_space_is_tunes_own() -> None:
    from ray.tune.search.sample import Categorical, Float

    from training.sweep.space import search_space

    grid = SweepConfig(search={"grpo.learning_rate": [1e-4, 5e-4], "grpo.loss_type": ["dapo"]})
    assert search_space(grid) == {"grpo.learning_rate": {"grid_search": [1e-4, 5e-4]},
                                  "grpo.loss_type": {"grid_search": ["dapo"]}}
    rand = SweepConfig(method="random", num_samples=3, seed=4, search={
        "grpo.learning_rate": {"low": 1e-5, "high": 1e-3, "log": True}, "grpo.beta": {"low": 0.0, "high": 0.1},
        "grpo.loss_type": ["dapo", "grpo"]})
    space = search_space(rand)
    assert isinstance(space["grpo.loss_type"], Categorical) and space["grpo.loss_type"].categories == ["dapo", "grpo"]
    lr, beta = space["grpo.learning_rate"], space["grpo.beta"]
    assert isinstance(lr, Float) and (lr.lower, lr.upper) == (1e-5, 1e-3) and "LogUniform" in type(lr.sampler).__name__
    assert isinstance(beta, Float) and "LogUniform" not in type(beta.sampler).__name__


@pytest.mark.parametrize("kind,cls", [("asha", "AsyncHyperBandScheduler"), ("median", "MedianStoppingRule"),
                                      ("none", "NoneType")])
def test_the_scheduler_is_the_configured_one(kind: str, cls: str) -> None:
    from training.sweep.space import scheduler

    sweep = SweepConfig(search={"grpo.max_steps": [4, 6]}, scheduler={"kind": kind, "grace_period": 2})
    got = scheduler(sweep)
    assert type(got).__name__ == cls
    if kind == "asha":
        assert got._max_t == 6 and got._time_attr == "step"  # the longest trial, in training steps


@pytest.mark.parametrize("overrides,message", [
    (["scheduler.kind=hyperband"], "scheduler.kind"),
    (["scheduler.reduction_factor=1"], "reduction_factor"),
    (["scheduler.grace_period=0"], "grace_period"),
])
def test_a_bad_scheduler_fails_in_one_line(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        load_sweep_config("configs/sweeps/cpu_grid.yaml", overrides)
    assert "\n" not in str(err.value)


def test_a_trial_reserves_its_plan() -> None:
    """Bundles from the trial's own placement plan: the learner's CPUs and GPUs, then one per rollout worker."""
    from training.cluster.placement_group import trial_bundles
    from training.cluster.preflight import preflight
    from training.cluster.resources import ClusterResources
    from training.config.train import load_train_config

    cfg = load_train_config(None, ["device=cuda", "placement.trainer_gpus=1", "rollout.backend=ray",
                                   "rollout.num_workers=2", "placement.gpus_per_worker=0.5"])
    plan = preflight(cfg, ClusterResources(gpus=4, cpus=16), log=False)
    assert trial_bundles(plan, 2.0) == [{"CPU": 2.0, "GPU": 1.0}, {"GPU": 0.5, "CPU": 1.0}, {"GPU": 0.5, "CPU": 1.0}]
    cpu = preflight(load_train_config(None, ["device=cpu", "rollout.backend=ray", "rollout.num_workers=2"]),
                    ClusterResources(gpus=0, cpus=4), log=False)
    assert trial_bundles(cpu, 1.0) == [{"CPU": 1.0}, {"CPU": 1.0}, {"CPU": 1.0}]
    inproc = preflight(load_train_config(None, ["device=cpu", "rollout.backend=inprocess"]),
                       ClusterResources(gpus=0, cpus=2), log=False)
    assert trial_bundles(inproc, 1.0) == [{"CPU": 1.0}]


# -- real sweeps (slow) -------------------------------------------------------------------------------
#: Runs four probe trials on a Ray cluster of 4 logical GPUs, each reserving ``trial_resources`` of a sweep whose
#: trials need 2 GPUs (the learner's and one rollout worker's); every probe records its span and GPUs.
GPU_PROBE = """
import json, sys, time
from pathlib import Path
import ray
from ray import tune
from training.config.sweep import SweepConfig
from training.sweep.space import trial_resources

out = Path(sys.argv[1])
rates = [1e-4, 2e-4, 3e-4, 4e-4]
sweep = SweepConfig(name="gpus", base=sys.argv[2], out=str(out), cpus_per_trial=0.5, max_concurrent_trials=4,
                    overrides=["device=cuda", "placement.trainer_gpus=1", "rollout.backend=ray",
                               "rollout.num_workers=1", "placement.gpus_per_worker=1"],
                    search={"grpo.learning_rate": rates})

def probe(config):
    from ray.util import get_current_placement_group
    gpus = sum(b.get("GPU", 0) for b in get_current_placement_group().bundle_specs)
    start = time.time()
    time.sleep(3)
    with (out / "held.jsonl").open("a") as f:
        f.write(json.dumps({"start": start, "end": time.time(), "gpus": gpus}) + "\\n")
    tune.report({"score": 0.0})

ray.init(num_cpus=4, num_gpus=4, include_dashboard=False, logging_level="WARNING")
tune.Tuner(tune.with_resources(probe, trial_resources(sweep)),
           param_space={"grpo.learning_rate": tune.grid_search(rates)},
           tune_config=tune.TuneConfig(max_concurrent_trials=4),
           run_config=tune.RunConfig(storage_path=str(out / "tune"), verbose=0)).fit()
ray.shutdown()
"""


# -- the report's figures (fast) ---------------------------------------------------------------------------
def _scatter(ax) -> dict[str, list[list[float]]]:
    """Each status's points of a scores panel: label -> [[x, score], ...]."""
    return {c.get_label(): c.get_offsets().tolist() for c in ax.collections}


def test_the_sweep_figures_draw_every_trial(tmp_path: Path) -> None:
    """scores.png: one panel per searched parameter, each scored trial a point marked by its status (a categorical
    value at its index); curves.png: one line per trial that logged the metric, a stopped trial's ending early."""
    from training.sweep.report import curves_figure, plot_curves, plot_scores, scores_figure

    sweep = SweepConfig(name="s", metric="val/reward/mean",
                        search={"grpo.learning_rate": [1e-5, 1e-3], "grpo.loss_type": ["grpo", "dapo"]})
    trials = [(1e-5, "grpo", "finished", 1.0, 3), (1e-3, "grpo", "stopped", 0.5, 1), (1e-5, "dapo", "finished", 2.0, 3),
              (1e-3, "dapo", "failed", None, 0)]
    rows = []
    for i, (lr, loss, status, score, steps) in enumerate(trials):
        rows.append({"trial": i, "status": status, "score": score, "grpo.learning_rate": lr, "grpo.loss_type": loss,
                     "run_dir": f"trial-{i}"})
        if steps:
            (tmp_path / f"trial-{i}").mkdir()
            (tmp_path / f"trial-{i}" / "metrics.jsonl").write_text("".join(
                json.dumps({"step": s, "val/reward/mean": i + s / 10}) + "\n" + json.dumps({"step": s}) + "\n"
                for s in range(1, steps + 1)))

    fig = scores_figure(sweep, rows)
    assert fig.get_suptitle() == "sweep s: score by parameter"
    lr, loss = fig.axes
    assert [ax.get_xlabel() for ax in fig.axes] == ["grpo.learning_rate", "grpo.loss_type"]
    assert {ax.get_ylabel() for ax in fig.axes} == {"val/reward/mean"}
    assert lr.get_xscale() == "log"  # values two orders of magnitude apart
    assert _scatter(lr) == {"finished": [[1e-5, 1.0], [1e-5, 2.0]], "stopped": [[1e-3, 0.5]]}  # no score: no point
    assert legend(lr) == ["finished", "stopped"]
    assert tick_labels(loss) == ["dapo", "grpo"]
    assert _scatter(loss) == {"finished": [[1.0, 1.0], [0.0, 2.0]], "stopped": [[1.0, 0.5]]}
    assert saved_as(fig, plot_scores(sweep, rows, tmp_path / "scores.png"), dpi=110)

    fig = curves_figure(sweep, rows, tmp_path)
    (ax,) = fig.axes
    assert ax.get_title() == "sweep s: val/reward/mean by step"
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("training step", "val/reward/mean")
    assert lines(ax) == {"trial 0 (finished)": ([1.0, 2.0, 3.0], [0.1, 0.2, 0.3]),
                         "trial 1 (stopped)": ([1.0], [1.1]),
                         "trial 2 (finished)": ([1.0, 2.0, 3.0], [2.1, 2.2, 2.3])}
    assert saved_as(fig, plot_curves(sweep, rows, tmp_path, tmp_path / "curves.png"), dpi=110)


@pytest.mark.slow
def test_concurrent_trials_never_hold_more_gpus_than_the_cluster(tmp_path: Path) -> None:
    """4 logical GPUs, trials of 2 (a learner GPU and one rollout worker's GPU), up to 4 allowed at once: Tune
    runs 2 at a time, each in its own placement group, and the GPUs held at any moment never exceed 4.  (Its own
    process: a Ray cluster with logical GPUs, apart from the test session's.)"""
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_USAGE_STATS_ENABLED": "0"}
    done = subprocess.run([sys.executable, "-c", GPU_PROBE, str(tmp_path), str(REPO / "configs/train/default.yaml")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=SWEEP_WAIT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    spans = [json.loads(line) for line in (tmp_path / "held.jsonl").read_text().splitlines()]
    assert len(spans) == 4 and all(s["gpus"] == 2 for s in spans)
    moments = sorted(t for s in spans for t in (s["start"], s["end"]))
    held = [sum(s["gpus"] for s in spans if s["start"] <= t < s["end"]) for t in moments]
    assert max(held) == 4  # two trials at once, and never a third


@pytest.mark.slow
def test_asha_stops_trials_early_and_records_them(policy_coin_model_dir: Path, tmp_path: Path) -> None:
    """The score is the episodes played so far, which a trial of 2 groups a step doubles over one of 1 whatever
    the CPU: played one after the other, the later 1-group trials fall below ASHA's first rung and stop there."""
    from training.sweep.run import run_sweep

    sweep = sweep_config(policy_coin_model_dir, tmp_path, steps=4, scheduler={"kind": "asha", "grace_period": 1},
                         search={"grpo.groups_per_step": [2, 1], "grpo.learning_rate": [1e-4, 1e-3]},
                         metric="rollout/episodes_total")
    result = run_sweep(sweep)
    rows = result["trials"]
    assert [r["trial"] for r in rows] == [0, 1, 2, 3]
    assert [r["status"] for r in rows if r["grpo.groups_per_step"] == 2] == ["finished", "finished"]
    stopped = [r for r in rows if r["status"] == "stopped"]
    assert stopped and all(r["grpo.groups_per_step"] == 1 and r["score"] == 2.0 * (r["steps"] + 1) and r["steps"] < 3
                           for r in stopped)
    assert result["best"]["status"] in ("finished", "stopped")
    out = tmp_path / "s"
    for name in ("trials.csv", "trials.md", "best.yaml"):
        assert (out / name).stat().st_size > 0, name
    # the figures hold every trial: its score in the panel of each searched parameter, its curve up to its stop
    from training.sweep.report import curves_figure, scores_figure

    scores = scores_figure(sweep, rows)
    assert [ax.get_xlabel() for ax in scores.axes] == ["grpo.groups_per_step", "grpo.learning_rate"]
    for ax, key in zip(scores.axes, ("grpo.groups_per_step", "grpo.learning_rate")):
        drawn = sorted(point for points in _scatter(ax).values() for point in points)
        assert drawn == sorted([float(r[key]), float(r["score"])] for r in rows if r["score"] is not None)
    assert saved_as(scores, out / "scores.png", dpi=110)
    curves = curves_figure(sweep, rows, out)
    drawn = lines(curves.axes[0])
    assert set(drawn) == {f"trial {r['trial']} ({r['status']})" for r in rows}
    finished_end = max(drawn[f"trial {r['trial']} (finished)"][0][-1] for r in rows if r["status"] == "finished")
    assert all(drawn[f"trial {r['trial']} (stopped)"][0][-1] < finished_end for r in stopped)
    assert saved_as(curves, out / "curves.png", dpi=110)


def _sweep_command(sweep: SweepConfig, config: Path, *extra: str) -> list[str]:
    config.write_text(json.dumps(sweep.model_dump(mode="json")))
    return [sys.executable, "-m", "training.cli", "sweep", str(config), *extra]


def _table(out: Path) -> list[dict]:
    with (out / "s" / "trials.csv").open() as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_an_interrupted_sweep_resumes_to_the_same_table(policy_coin_model_dir: Path, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1",
           "RAY_USAGE_STATS_ENABLED": "0", "TOKENIZERS_PARALLELISM": "false"}
    straight = sweep_config(policy_coin_model_dir, tmp_path / "a", steps=3)
    done = subprocess.run(_sweep_command(straight, tmp_path / "a.yaml"), cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=SWEEP_WAIT_S)
    assert done.returncode == 0, done.stderr[-3000:]

    cut = sweep_config(policy_coin_model_dir, tmp_path / "b", steps=3)
    # the sweep must hear Ctrl-C even where this test runs with SIGINT ignored (a background job of a
    # non-interactive shell): its child then starts with the default disposition
    proc = subprocess.Popen(_sweep_command(cut, tmp_path / "b.yaml"), cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    drained = threading.Thread(target=proc.stdout.read, daemon=True)
    drained.start()
    first = tmp_path / "b" / "s" / "s-trial-0" / "checkpoints"
    deadline = time.time() + SWEEP_WAIT_S
    # Ctrl-C in the middle of trial 0: at its first sealed checkpoint, two steps before its end (at the second, the
    # sweep could finish before the signal lands)
    while not (first.is_dir() and any(first.glob("checkpoint-1/manifest.json"))) and time.time() < deadline:
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGINT)
    proc.wait(timeout=SWEEP_WAIT_S)
    assert not (tmp_path / "b" / "s" / "trials.csv").exists()
    again = subprocess.run(_sweep_command(cut, tmp_path / "b.yaml", "--resume"), cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=SWEEP_WAIT_S)
    assert again.returncode == 0, again.stderr[-3000:]
    assert _table(tmp_path / "b") == _table(tmp_path / "a")
    steps = [json.loads(line)["step"] for line in (tmp_path / "b/s/s-trial-0/metrics.jsonl").read_text().splitlines()
             if "val/reward/mean" in line]
    assert steps == [0, 1, 2, 3]  # each validation check once (step 0: the starting weights)
