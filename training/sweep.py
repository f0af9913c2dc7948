"""``replicalab sweep``: hyperparameter trials as Ray Tune trials, each a W&B run in one group.

Each trial trains ``base`` + ``overrides`` + its parameters; its score is the mean of the metric's
last ``metric_window`` values in the run's ``metrics.jsonl``: a ``val/...`` metric (validation seeds) or
a training-side one; the test split is never used to choose hyperparameters (``SweepConfig`` refuses a
test metric, and ``metric_value`` refuses to read one).  The result is ``trials.csv``/``trials.md`` and
``best.yaml`` (the best trial's resolved config) under ``out/name``.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any

from training.config.sweep import FORBIDDEN_METRIC_PREFIXES, SweepConfig, trial_overrides


def metric_value(run_dir: Path, metric: str, window: int) -> float:
    """Mean of ``metric``'s last ``window`` values in ``run_dir/metrics.jsonl`` (never a test-split metric)."""
    if metric.startswith(FORBIDDEN_METRIC_PREFIXES):
        raise ValueError(f"metric {metric!r} is on the test split, which nothing may select on")
    values = [row[metric] for row in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
              if metric in row]
    if not values:
        raise KeyError(f"metric {metric!r} was never logged in {run_dir}")
    tail = values[-window:]
    return sum(tail) / len(tail)


def _trial(params: dict[str, Any], sweep: SweepConfig, index: int) -> dict[str, Any]:
    from training.config.train import load_train_config
    from training.trainer.run import run_train

    out = Path(sweep.out).resolve() / sweep.name
    cfg = load_train_config(sweep.base, [
        *sweep.overrides, *trial_overrides(params), f"run_name={sweep.name}-trial-{index}",
        f"output_dir={out}", f"wandb.group={sweep.name}",
    ])
    run_train(cfg)
    return {"score": metric_value(cfg.run_dir, sweep.metric, sweep.metric_window), "run_dir": str(cfg.run_dir)}


def run_sweep(sweep: SweepConfig) -> dict[str, Any]:
    import ray
    from ray import tune

    out = Path(sweep.out) / sweep.name
    out.mkdir(parents=True, exist_ok=True)
    sweep = sweep.model_copy(update={"base": str(Path(sweep.base).resolve()), "out": str(Path(sweep.out).resolve())})
    os.environ.setdefault("RAY_CHDIR_TO_TRIAL_DIR", "0")  # trials resolve relative paths from here
    points = sweep.trials()
    started = not ray.is_initialized()
    if started:
        ray.init(include_dashboard=False, log_to_driver=False)

    def trainable(config: dict[str, Any]) -> None:
        tune.report(_trial(points[config["index"]], sweep, config["index"]))

    tuner = tune.Tuner(
        tune.with_resources(trainable, {"cpu": sweep.cpus_per_trial}),
        param_space={"index": tune.grid_search(list(range(len(points))))},
        tune_config=tune.TuneConfig(metric="score", mode=sweep.mode, max_concurrent_trials=sweep.max_concurrent_trials),
        run_config=tune.RunConfig(name=sweep.name, storage_path=str(out.resolve() / "tune"), verbose=1),
    )
    results = tuner.fit()
    rows = []
    for r in results:
        if r.error is not None:
            rows.append({"index": r.config["index"], **points[r.config["index"]], "score": None, "error": str(r.error)[:200]})
        else:
            rows.append({"index": r.config["index"], **points[r.config["index"]], "score": r.metrics["score"],
                         "run_dir": r.metrics["run_dir"]})
    rows.sort(key=lambda row: row["index"])
    done = [row for row in rows if row.get("score") is not None]
    if not done:
        raise RuntimeError(f"every trial of sweep {sweep.name} failed; see {out / 'trials.csv'}")
    best = (max if sweep.mode == "max" else min)(done, key=lambda row: row["score"])
    _write_table(out, rows)
    best_cfg = Path(best["run_dir"]) / "config.yaml"
    (out / "best.yaml").write_text(best_cfg.read_text(), encoding="utf-8")
    if started:
        ray.shutdown()
    return {"trials": rows, "best": best, "best_config": str(out / "best.yaml")}


def _write_table(out: Path, rows: list[dict[str, Any]]) -> None:
    keys = list(dict.fromkeys(k for row in rows for k in row))
    with (out / "trials.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys)
        writer.writeheader()
        writer.writerows(rows)
    lines = ["| " + " | ".join(keys) + " |", "|---" * len(keys) + "|"]
    lines += ["| " + " | ".join(str(row.get(k, "")) for k in keys) + " |" for row in rows]
    (out / "trials.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def print_sweep(result: dict[str, Any]) -> None:
    print("\nSweep finished")
    for row in result["trials"]:
        print("  ", row)
    print(f"best: trial {result['best']['index']} score {result['best']['score']:.4f}; config {result['best_config']}")
