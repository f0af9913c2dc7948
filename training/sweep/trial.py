"""One sweep trial: ``replicalab train`` of ``base`` + ``overrides`` + the trial's parameters, reporting its
score to Ray Tune every time the run logs the sweep's metric, and resuming from its own checkpoints when the
sweep is resumed.

A trial's score at step ``s`` is the mean of the metric's last ``metric_window`` values in its
``metrics.jsonl`` up to ``s`` (``metric_value``); a ``val/...`` metric is logged by the validation check, so a
scheduler sees every check after step 0 (the check at step 0 measures the starting weights, not the trial).
The run directory is ``out/name/<name>-trial-<k>`` (``k``: Tune's trial number).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from training.config.sweep import FORBIDDEN_METRIC_PREFIXES, VALIDATION_PREFIX, SweepConfig, trial_overrides
from training.config.train import TrainConfig, load_train_config

#: Where an interrupted trial's run directory goes when it holds no complete checkpoint to resume from (kept,
#: never deleted): ``<run_dir>.restart-N``.
RESTART_SUFFIX = ".restart-"


def starting_check(step: Any, metric: str) -> bool:
    """Whether a row of ``metric`` at ``step`` is the validation check of the weights before training."""
    return step == 0 and metric.startswith(VALIDATION_PREFIX)


def metric_value(run_dir: Path, metric: str, window: int) -> float:
    """Mean of ``metric``'s last ``window`` values in ``run_dir/metrics.jsonl`` (never a test-split metric)."""
    if metric.startswith(FORBIDDEN_METRIC_PREFIXES):
        raise ValueError(f"metric {metric!r} is on the test split, which nothing may select on")
    values = [row[metric] for row in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
              if metric in row and not starting_check(row.get("step"), metric)]
    if not values:
        raise KeyError(f"metric {metric!r} was never logged in {run_dir}")
    tail = values[-window:]
    return sum(tail) / len(tail)


def sweep_dir(sweep: SweepConfig) -> Path:
    """The sweep's directory: its trials' runs, the table, the best config, the plots and Tune's state."""
    return Path(sweep.out).resolve() / sweep.name


def trial_name(sweep: SweepConfig, index: int) -> str:
    return f"{sweep.name}-trial-{index}"


def trial_config(sweep: SweepConfig, params: dict[str, Any], index: int = 0) -> TrainConfig:
    """The ``TrainConfig`` of trial ``index`` with ``params``."""
    return load_train_config(sweep.base, [
        *sweep.overrides, *trial_overrides(params), f"run_name={trial_name(sweep, index)}",
        f"output_dir={sweep_dir(sweep)}", f"wandb.group={sweep.name}",
    ])


def _resumable(cfg: TrainConfig) -> bool:
    """Whether the trial's run directory holds a complete checkpoint; a started run without one is moved aside
    (kept as ``<run_dir>.restart-N``) so the trial starts again."""
    from training.trainer.checkpoints import checkpoints
    from training.trainer.run import BEFORE_START_FILES

    run_dir = Path(cfg.run_dir)
    if checkpoints(cfg.checkpoints_dir):
        return True
    if run_dir.is_dir() and any(p.name not in BEFORE_START_FILES for p in run_dir.iterdir()):
        n = 1
        while run_dir.with_name(f"{run_dir.name}{RESTART_SUFFIX}{n}").exists():
            n += 1
        run_dir.rename(run_dir.with_name(f"{run_dir.name}{RESTART_SUFFIX}{n}"))
    return False


def run_trial(params: dict[str, Any], sweep: SweepConfig, index: int,
              report: Any = None) -> dict[str, Any]:
    """Train trial ``index``; ``report(metrics)`` (Tune's ``tune.report`` in a sweep) gets ``{score, step}``
    every time the metric is logged.  Returns the final score and the run directory."""
    from training.trainer.run import run_train

    cfg = trial_config(sweep, params, index)
    run_dir = Path(cfg.run_dir)

    def observe(step: int, metrics: dict) -> None:
        if report is not None and not starting_check(step, sweep.metric) and sweep.metric in metrics:
            report({"score": metric_value(run_dir, sweep.metric, sweep.metric_window), "step": step})

    run_train(cfg, resume=_resumable(cfg), observe=observe)
    return {"score": metric_value(run_dir, sweep.metric, sweep.metric_window), "run_dir": str(run_dir)}
