"""A sweep's report: ``trials.csv`` and ``trials.md`` (one row per trial), ``best.yaml`` (the best trial's resolved
config), ``scores.png`` (the score against each searched parameter, stopped trials marked) and ``curves.png``
(every trial's metric by training step, read back from its ``metrics.jsonl``).  Each plot is built by a ``*_figure``
function (a matplotlib ``Figure``, no pyplot state) and saved by its ``plot_*`` function."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from training.config.sweep import Range, SweepConfig

if TYPE_CHECKING:
    from matplotlib.figure import Figure

TABLE_CSV, TABLE_MD, BEST_YAML = "trials.csv", "trials.md", "best.yaml"
SCORES_PNG, CURVES_PNG = "scores.png", "curves.png"
#: Marker of each status in the plots.
MARKERS = {"finished": "o", "stopped": "x", "failed": "s"}


def write_report(sweep: SweepConfig, out: Path, rows: Sequence[dict[str, Any]], best: dict[str, Any]) -> list[Path]:
    """Write the table, the best config and the plots under ``out``; return the files written."""
    keys = list(dict.fromkeys(k for row in rows for k in row))
    with (out / TABLE_CSV).open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys)
        writer.writeheader()
        writer.writerows(rows)
    lines = [f"Sweep {sweep.name}: metric {sweep.metric} ({sweep.mode}, mean of the last {sweep.metric_window}), "
             f"scheduler {sweep.scheduler.kind}; best: trial {best['trial']}.", "",
             "| " + " | ".join(keys) + " |", "|---" * len(keys) + "|"]
    lines += ["| " + " | ".join(_cell(row.get(k, "")) for k in keys) + " |" for row in rows]
    (out / TABLE_MD).write_text("\n".join(lines) + "\n", encoding="utf-8")
    (out / BEST_YAML).write_text((out / best["run_dir"] / "config.yaml").read_text(), encoding="utf-8")
    return [out / TABLE_CSV, out / TABLE_MD, out / BEST_YAML, plot_scores(sweep, rows, out / SCORES_PNG),
            plot_curves(sweep, rows, out, out / CURVES_PNG)]


def _cell(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def scores_figure(sweep: SweepConfig, rows: Sequence[dict[str, Any]]) -> Figure:
    """One panel per searched parameter: each trial's score against its value, one marker per status."""
    from matplotlib.figure import Figure

    keys = list(sweep.search)
    fig = Figure(figsize=(4.2 * len(keys), 3.4))
    axes = fig.subplots(1, len(keys), squeeze=False)
    for ax, key in zip(axes[0], keys):
        values = [row[key] for row in rows]
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
        order = sorted({str(v) for v in values}) if not numeric else None
        for status, marker in MARKERS.items():
            mine = [row for row in rows if row["status"] == status and row["score"] is not None]
            if mine:
                xs = [row[key] if numeric else order.index(str(row[key])) for row in mine]
                ax.scatter(xs, [row["score"] for row in mine], marker=marker, label=status)
        if order is not None:
            ax.set_xticks(range(len(order)), order)
        spec = sweep.search[key]
        if isinstance(spec, Range) and spec.log or numeric and min(values) > 0 and max(values) / min(values) >= 50:
            ax.set_xscale("log")
        ax.set_xlabel(key)
        ax.set_ylabel(sweep.metric)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"sweep {sweep.name}: score by parameter")
    fig.tight_layout()
    return fig


def plot_scores(sweep: SweepConfig, rows: Sequence[dict[str, Any]], path: Path) -> Path:
    """``scores_figure`` saved as a PNG at ``path``."""
    scores_figure(sweep, rows).savefig(path, dpi=110)
    return path


def curves_figure(sweep: SweepConfig, rows: Sequence[dict[str, Any]], out: Path) -> Figure:
    """Every trial's metric by training step, one line per trial that logged it (a stopped trial's curve ends where
    the scheduler stopped it); the trials' run directories are under ``out``."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 4.0))
    ax = fig.subplots()
    for row in rows:
        metrics = out / row["run_dir"] / "metrics.jsonl"
        if not metrics.is_file():
            continue
        points = [(r["step"], r[sweep.metric]) for r in map(json.loads, metrics.read_text().splitlines())
                  if sweep.metric in r]
        if points:
            label = f"trial {row['trial']} ({row['status']})"
            ax.plot(*zip(*points), marker=MARKERS.get(row["status"], "o"), markersize=3, label=label)
    ax.set_xlabel("training step")
    ax.set_ylabel(sweep.metric)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(f"sweep {sweep.name}: {sweep.metric} by step")
    fig.tight_layout()
    return fig


def plot_curves(sweep: SweepConfig, rows: Sequence[dict[str, Any]], out: Path, path: Path) -> Path:
    """``curves_figure`` saved as a PNG at ``path``."""
    curves_figure(sweep, rows, out).savefig(path, dpi=110)
    return path
