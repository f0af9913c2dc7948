"""The learning curve of a run, read back from its ``metrics.jsonl``.

``learning_curve(run_dir)`` merges the rows of each step into one and keeps the curves a user looks at
first: the training episodes' mean reward and hard-cell reward, how often the Scientist uses each skill
where its trigger shows (``replicalab.skill_use``), the reward per cell, and the periodic validation reward.  ``curve_table`` prints them in windows of steps (episode-weighted means), and
``learning_curve_figure`` draws them and ``plot_learning_curve`` saves the drawing (``learning_curve.png`` in the run
directory at the end of a run); ``seat_table``, ``seat_curves_figure`` and ``plot_seat_curves`` do the same for the
per-seat validation checks.  Pure file reading; matplotlib only in the figures (its ``Figure``, no pyplot state).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

from replicalab.agents.skilled import SKILLS
from replicalab.scenarios import cells
from training.tracking import METRICS_FILE

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: (metrics key, column title, key of its count: the weight of a window mean) for each curve.
CURVES: tuple[tuple[str, str, str], ...] = (
    ("reward/mean", "reward", "episode/count"),
    ("by_difficulty/hard/reward", "hard-cell reward", "by_difficulty/hard/count"),
    *((f"skill/{skill}/use_rate", f"{skill}: use where it pays", f"skill/{skill}/count") for skill in SKILLS),
)
#: Line style of each difficulty in the reward-per-cell panel (one color per template).
DIFFICULTY_STYLES = {"easy": ":", "medium": "--", "hard": "-"}
#: The validation check's reward (logged every ``validation.every_steps``).
VALIDATION_REWARD = "val/reward/mean"
CURVE_PNG = "learning_curve.png"
#: Each trained seat against its fixed validation opponents (``val/<role>/...``), drawn when the run logged them.
SEATS_PNG = "seats_curve.png"
ROLE_NAMES = {"scientist": "Scientist", "lab_manager": "Lab Manager"}
#: One color per seat in every panel of ``seats_curve.png``.
ROLE_COLORS = {"scientist": "tab:blue", "lab_manager": "tab:orange"}


def learning_curve(run_dir: Path | str) -> list[dict[str, float]]:
    """One dict per logged step (``{"step", <metric>: value}``, the step's rows merged), in step order;
    empty when the run has no metrics yet."""
    path = Path(run_dir) / METRICS_FILE
    if not path.exists():
        return []
    steps: dict[int, dict[str, float]] = {}
    for line in path.read_text().splitlines():
        row = json.loads(line)
        steps.setdefault(int(row["step"]), {"step": int(row["step"])}).update(
            {k: v for k, v in row.items() if isinstance(v, (int, float))})
    return [steps[s] for s in sorted(steps)]


def _window_mean(rows: list[dict[str, float]], key: str, count_key: str) -> float:
    pairs = [(r[key], r.get(count_key, 1.0)) for r in rows
             if key in r and not math.isnan(r[key]) and r.get(count_key, 1.0) > 0]
    weight = sum(w for _, w in pairs)
    return sum(v * w for v, w in pairs) / weight if weight else float("nan")


def curve_table(rows: list[dict[str, float]], window: int = 8) -> str:
    """A markdown table of the curves, one line per ``window`` consecutive steps (episode-weighted
    means over the window; ``-`` where a window has none), the validation reward at its last check."""
    head = ["steps", *(title for _, title, _ in CURVES), "validation reward"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for start in range(0, len(rows), window):
        chunk = rows[start:start + window]
        cells = [f"{int(chunk[0]['step'])}-{int(chunk[-1]['step'])}"]
        for key, _, count_key in CURVES:
            value = _window_mean(chunk, key, count_key)
            cells.append("-" if math.isnan(value) else f"{value:.3f}" if key.startswith("skill/") else f"{value:.2f}")
        checks = [r[VALIDATION_REWARD] for r in chunk if VALIDATION_REWARD in r]
        cells.append(f"{checks[-1]:.2f}" if checks else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def learning_curve_figure(rows: list[dict[str, float]], window: int = 8) -> Figure | None:
    """Reward (train, hard cells, validation), each skill's use rate and the reward per cell by step, in three panels
    sharing the step axis; moving averages over ``window`` steps.  None when there is nothing to draw."""
    if not rows:
        return None
    from matplotlib.figure import Figure

    def smooth(key: str, count_key: str) -> tuple[list[float], list[float]]:
        xs, ys = [], []
        for i, row in enumerate(rows):
            value = _window_mean(rows[max(0, i - window + 1): i + 1], key, count_key)
            if not math.isnan(value):
                xs.append(row["step"])
                ys.append(value)
        return xs, ys

    fig = Figure(figsize=(8, 9))
    top, middle, bottom = fig.subplots(3, 1, sharex=True)
    for key, title, count_key in CURVES:
        axis = middle if key.startswith("skill/") else top
        axis.plot(*smooth(key, count_key), label=title)
    checks = [(r["step"], r[VALIDATION_REWARD]) for r in rows if VALIDATION_REWARD in r]
    if checks:
        top.plot(*zip(*checks), "o-", label="validation reward")
    colors = {}
    for template, difficulty in cells():
        xs, ys = smooth(f"by_cell/{template}/{difficulty}/reward", f"by_cell/{template}/{difficulty}/count")
        if xs:
            color = colors.setdefault(template, f"C{len(colors)}")
            bottom.plot(xs, ys, DIFFICULTY_STYLES.get(difficulty, "-"), color=color, label=f"{template} {difficulty}")
    top.set_ylabel(f"mean reward ({window}-step average)")
    middle.set_ylabel("share of the skill's chances")
    middle.set_ylim(-0.02, 1.02)
    bottom.set_ylabel("reward per cell")
    bottom.set_xlabel("step")
    for axis in (top, middle, bottom):
        if axis.lines:
            axis.legend(fontsize=6, ncol=3 if axis is bottom else 1)
        axis.grid(alpha=0.3)
    top.set_title("Learning curve")
    fig.tight_layout()
    return fig


def plot_learning_curve(rows: list[dict[str, float]], out: Path | str, window: int = 8) -> Path | None:
    """``learning_curve_figure`` saved as a PNG at ``out``; None (nothing written) when there is nothing to draw."""
    fig = learning_curve_figure(rows, window)
    if fig is None:
        return None
    out = Path(out)
    fig.savefig(out, dpi=120)
    return out


def seat_table(rows: list[dict[str, float]]) -> str:
    """A markdown table of every per-seat validation check: step, then each seat's own reward, agreement rate and
    parse failure rate against its fixed opponents."""
    roles = [r for r in ROLE_NAMES if any(f"val/{r}/reward" in row for row in rows)]
    keys = [(r, k) for r in roles for k in ("reward", "agreement_rate", "parse_failure_rate")]
    head = ["step", *(f"{ROLE_NAMES[r]} {k.replace('_', ' ')}" for r, k in keys)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        if any(f"val/{r}/reward" in row for r in roles):
            cells = [str(int(row["step"]))] + [f"{row[f'val/{r}/{k}']:.3f}" if f"val/{r}/{k}" in row else "-"
                                               for r, k in keys]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def seat_curves_figure(rows: list[dict[str, float]], window: int = 8) -> Figure | None:
    """Per trained seat, its own validation reward against its fixed opponents, the agreement rate and the parse
    failure rate (validation checks; the training episodes' per-role parse failures as a ``window``-step average),
    in three panels sharing the step axis.  None when the run logged no per-seat validation."""
    roles = [r for r in ROLE_NAMES if any(f"val/{r}/reward" in row for row in rows)]
    if not roles:
        return None
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 7.5))
    axes = fig.subplots(3, 1, sharex=True)
    for role in roles:
        name = ROLE_NAMES[role]
        for axis, key in zip(axes, ("reward", "agreement_rate", "parse_failure_rate")):
            checks = [(row["step"], row[f"val/{role}/{key}"]) for row in rows if f"val/{role}/{key}" in row]
            if checks:
                axis.plot(*zip(*checks), "o-", color=ROLE_COLORS[role], label=f"{name} (validation)")
        train = f"by_role/{role}/parse_failure_rate"
        xs = [row["step"] for row in rows if train in row]
        ys = [_window_mean([r for r in rows if xs and x - window < r["step"] <= x], train, "episode/count") for x in xs]
        if xs:
            axes[2].plot(xs, ys, "--", color=ROLE_COLORS[role], label=f"{name} (training episodes)")
    for axis, label in zip(axes, ("own reward vs fixed opponents", "agreement rate", "parse failure rate")):
        axis.set_ylabel(label)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    axes[2].set_xlabel("step")
    axes[0].set_title("Each seat against fixed opponents on validation seeds")
    fig.tight_layout()
    return fig


def plot_seat_curves(rows: list[dict[str, float]], out: Path | str, window: int = 8) -> Path | None:
    """``seat_curves_figure`` saved as a PNG at ``out``; None (nothing written) when the run logged no per-seat
    validation."""
    fig = seat_curves_figure(rows, window)
    if fig is None:
        return None
    out = Path(out)
    fig.savefig(out, dpi=120)
    return out
