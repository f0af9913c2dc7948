"""``replicalab sweep CONFIG [--resume]``: hyperparameter trials as Ray Tune trials, each a W&B run in one group.

Each trial trains ``base`` + ``overrides`` + its point of Tune's search space (``training.sweep.space``) and
reports its score every time its run logs the sweep's metric (``training.sweep.trial``), so Tune's schedulers
(ASHA, median stopping) can stop it early; a stopped trial is recorded as ``stopped`` with its last score, a
failed one as ``failed`` with its error.  Each trial reserves the placement group of its own plan (the
learner's CPUs and GPUs, then its rollout workers' bundles), so concurrent trials never oversubscribe the
cluster.  The test split is never used to choose hyperparameters (``SweepConfig`` refuses a test metric, and
``metric_value`` refuses to read one).

``resume=True`` continues an interrupted sweep from Tune's state in ``out/name/tune``: finished and stopped
trials are kept, unfinished ones resume from their own training checkpoints (or start again), and each run's
logs are cut back to its checkpoint, so nothing is counted twice.  The result (``training.sweep.report``) is
``trials.csv``/``trials.md``, ``best.yaml`` (the best trial's resolved config) and the plots, under
``out/name``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from training.config.sweep import SweepConfig
from training.errors import UserInputError
from training.sweep.report import write_report
from training.sweep.space import SCORE, scheduler, search_algorithm, search_space, trial_resources
from training.sweep.trial import run_trial, sweep_dir, trial_config

#: Tune's experiment state, under the sweep's directory.
TUNE_DIRNAME = "tune"
#: A trial's status in the table.
FINISHED, STOPPED, FAILED = "finished", "stopped", "failed"
#: Exit status of an interrupted sweep (128 + SIGINT, as for an interrupted training run).
INTERRUPTED_EXIT_CODE = 130


class SweepInterrupted(Exception):
    """The sweep stopped before every trial ended (Ctrl-C): Tune saved its state; ``--resume`` continues it."""

    exit_code = INTERRUPTED_EXIT_CODE


def _trial_number(trial_id: str) -> int:
    """Tune's running number of a trial (its id ends with it: ``abc12_00003`` is trial 3)."""
    return int(trial_id.rsplit("_", 1)[-1])


def _trainable(sweep: SweepConfig):
    from ray import tune

    def trainable(config: dict[str, Any]) -> None:
        index = _trial_number(tune.get_context().get_trial_id())
        params = {k: config[k] for k in sweep.search}
        result = run_trial(params, sweep, index, report=tune.report)
        # the last report is at max_steps: a metric logged during the last step reports it at max_steps - 1
        tune.report({SCORE: result["score"], "step": trial_config(sweep, params, index).grpo.max_steps})

    return tune.with_resources(trainable, trial_resources(sweep))


def run_sweep(sweep: SweepConfig, *, resume: bool = False) -> dict[str, Any]:
    """Run (or with ``resume`` continue) the sweep; return its rows, the best row and the report's files."""
    import ray
    from ray import tune

    sweep = sweep.model_copy(update={"base": str(Path(sweep.base).resolve()), "out": str(Path(sweep.out).resolve())})
    out = sweep_dir(sweep)
    state = out / TUNE_DIRNAME / sweep.name
    if resume and not state.is_dir():
        raise UserInputError(f"no sweep to resume in {out} (no Tune state at {state}); run it without --resume")
    if not resume and state.is_dir():
        raise UserInputError(f"{out} already holds sweep {sweep.name!r}; pass --resume to continue it or choose "
                             "another name or out")
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("RAY_CHDIR_TO_TRIAL_DIR", "0")  # trials resolve relative paths from here
    # Ctrl-C reaches us as KeyboardInterrupt: Tune's own handler would end the running trials as if complete,
    # and a resumed sweep would not continue them.  Tune's saved state then lists them as unfinished.
    os.environ.setdefault("TUNE_DISABLE_SIGINT_HANDLER", "1")
    started = not ray.is_initialized()
    if started:
        ray.init(include_dashboard=False, log_to_driver=False)
    try:
        trainable = _trainable(sweep)
        if resume:
            tuner = tune.Tuner.restore(str(state), trainable=trainable, resume_unfinished=True,
                                       resume_errored=True)
        else:
            tuner = tune.Tuner(
                trainable, param_space=search_space(sweep),
                tune_config=tune.TuneConfig(metric=SCORE, mode=sweep.mode, num_samples=1 if sweep.method == "grid"
                                            else sweep.num_trials, search_alg=search_algorithm(sweep),
                                            scheduler=scheduler(sweep)),  # the generator caps concurrency
                run_config=tune.RunConfig(name=sweep.name, storage_path=str(out / TUNE_DIRNAME), verbose=1),
            )
        try:
            results = tuner.fit()
        except KeyboardInterrupt:
            raise SweepInterrupted(f"sweep {sweep.name} interrupted; its state is saved in {state}: continue it with "
                                   "replicalab sweep CONFIG [the same overrides] --resume") from None
        rows = [_row(sweep, r) for r in results]
    finally:
        if started:
            ray.shutdown()
    rows.sort(key=lambda row: row["trial"])
    done = [row for row in rows if row["score"] is not None]
    if not done:
        raise RuntimeError(f"every trial of sweep {sweep.name} failed; see {out / 'trials.csv'}")
    best = (max if sweep.mode == "max" else min)(done, key=lambda row: row["score"])
    files = write_report(sweep, out, rows, best)
    return {"trials": rows, "best": best, "best_config": str(out / "best.yaml"), "files": files}


def _row(sweep: SweepConfig, result: Any) -> dict[str, Any]:
    """One trial's row: its number, parameters, status (finished, stopped by the scheduler, failed), score (the
    last reported; None for a failed trial), steps reached and run directory (relative to the sweep's)."""
    metrics = result.metrics or {}
    trial = _trial_number(metrics.get("trial_id") or _id_of(result))
    params = {k: result.config[k] for k in sweep.search}
    cfg = trial_config(sweep, params, trial)
    failed = result.error is not None
    # a trial reached max_steps (its last report, or the scheduler stopped it at its last check) or stopped before
    status = FAILED if failed else FINISHED if (metrics.get("step") or 0) >= cfg.grpo.max_steps else STOPPED
    score = None if failed or SCORE not in metrics else float(metrics[SCORE])
    run_dir = Path(cfg.run_dir).relative_to(sweep_dir(sweep))
    row = {"trial": trial, **params, "status": status, "score": score, "steps": metrics.get("step"),
           "run_dir": str(run_dir)}
    if failed:
        row["error"] = " ".join(str(result.error).split())[:200]
    return row


def _id_of(result: Any) -> str:
    """The Tune trial id of a result that reported nothing (its directory is ``trainable_<id>_<n>_...``)."""
    parts = Path(result.path).name.split("_")
    return f"{parts[1]}_{parts[2]}"


def print_sweep(result: dict[str, Any]) -> None:
    print("\nSweep finished")
    for row in result["trials"]:
        print("  ", row)
    best = result["best"]
    print(f"best: trial {best['trial']} score {best['score']:.4f}; config {result['best_config']}")
    for path in result["files"]:
        print(f"  {path}")
