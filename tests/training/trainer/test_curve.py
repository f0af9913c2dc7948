"""The learning curve read back from a run's metrics.jsonl: steps merged, windows weighted by counts, and the
figures: each curve in its panel with its moving average, the validation checks, the per-seat checks."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from figures import legend, lines, saved_as

from training.trainer.curve import (
    ROLE_COLORS,
    curve_table,
    learning_curve,
    learning_curve_figure,
    plot_learning_curve,
    plot_seat_curves,
    seat_curves_figure,
    seat_table,
)


def _write(run_dir: Path, rows: list[dict]) -> None:
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_rows_of_a_step_are_merged_in_step_order(tmp_path: Path) -> None:
    _write(tmp_path, [
        {"step": 2, "reward/mean": 5.0, "episode/count": 32},
        {"step": 1, "reward/mean": 3.0, "episode/count": 32},
        {"step": 1, "train/loss": 0.1, "tag": "text is skipped"},
        {"step": 2, "val/reward/mean": 6.0},
    ])
    rows = learning_curve(tmp_path)
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[0] == {"step": 1, "reward/mean": 3.0, "episode/count": 32, "train/loss": 0.1}
    assert rows[1]["val/reward/mean"] == 6.0
    assert learning_curve(tmp_path / "missing") == []


def test_window_means_weigh_each_step_by_its_turns(tmp_path: Path) -> None:
    key, count = "skill/read/use_rate", "skill/read/count"
    _write(tmp_path, [
        {"step": 1, "reward/mean": 2.0, "episode/count": 10, key: 0.0, f"{count}": 30},
        {"step": 2, "reward/mean": 4.0, "episode/count": 30, key: 1.0, f"{count}": 10},
        {"step": 3, "reward/mean": 8.0, "episode/count": 10, key: math.nan, f"{count}": 0},
        {"step": 3, "val/reward/mean": 7.5},
    ])
    table = curve_table(learning_curve(tmp_path), window=2).splitlines()
    assert table[2].startswith("| 1-2 | 3.50 |")        # (2 x 10 + 4 x 30) / 40
    assert "| 0.250 |" in table[2]                        # (0 x 30 + 1 x 10) / 40
    assert table[3].startswith("| 3-3 | 8.00 |") and "| - |" in table[3] and table[3].endswith("| 7.50 |")


def test_the_learning_curve_draws_each_curve_in_its_panel(tmp_path: Path) -> None:
    """Reward, hard-cell reward and validation on top, the skills' use rates in the middle, the reward per cell at
    the bottom (one color per template, one line style per difficulty); ``window``-step moving averages."""
    _write(tmp_path, [{"step": s, "reward/mean": float(s), "episode/count": 8,
                       "by_difficulty/hard/reward": s / 2, "by_difficulty/hard/count": 4,
                       "skill/read/use_rate": 0.5, "skill/read/count": 10,
                       "by_cell/cell_biology/easy/reward": 1.0, "by_cell/cell_biology/easy/count": 2,
                       "by_cell/cell_biology/hard/reward": float(-s), "by_cell/cell_biology/hard/count": 2,
                       "by_cell/ml_benchmark/hard/reward": 0.0, "by_cell/ml_benchmark/hard/count": 2,
                       **({"val/reward/mean": s - 0.5} if s % 2 == 0 else {})} for s in range(1, 5)])
    rows = learning_curve(tmp_path)
    fig = learning_curve_figure(rows, window=2)
    top, middle, bottom = fig.axes
    assert top.get_title() == "Learning curve" and top.get_ylabel() == "mean reward (2-step average)"
    assert middle.get_ylabel() == "share of the skill's chances" and middle.get_ylim() == (-0.02, 1.02)
    assert (bottom.get_ylabel(), bottom.get_xlabel()) == ("reward per cell", "step")
    steps = [1.0, 2.0, 3.0, 4.0]
    assert lines(top) == {"reward": (steps, [1.0, 1.5, 2.5, 3.5]),  # (s-1 + s) / 2 after the first step
                          "hard-cell reward": (steps, [0.5, 0.75, 1.25, 1.75]),
                          "validation reward": ([2.0, 4.0], [1.5, 3.5])}  # the checks themselves, not averaged
    assert legend(top) == ["reward", "hard-cell reward", "validation reward"]
    assert lines(middle) == {"read: use where it pays": (steps, [0.5] * 4), "defend: use where it pays": ([], []),
                             "ask: use where it pays": ([], [])}  # a skill that never had a chance: no points
    cells = {line.get_label(): line for line in bottom.get_lines()}
    assert set(cells) == {"cell_biology easy", "cell_biology hard", "ml_benchmark hard"}
    assert lines(bottom)["cell_biology hard"] == (steps, [-1.0, -1.5, -2.5, -3.5])
    assert [cells[c].get_linestyle() for c in sorted(cells)] == [":", "-", "-"]
    assert cells["cell_biology easy"].get_color() == cells["cell_biology hard"].get_color() \
        != cells["ml_benchmark hard"].get_color()
    out = plot_learning_curve(rows, tmp_path / "curve.png", window=2)
    assert out == tmp_path / "curve.png" and saved_as(fig, out, dpi=120)
    assert learning_curve_figure([]) is None and plot_learning_curve([], tmp_path / "none.png") is None
    assert not (tmp_path / "none.png").exists()


def test_seat_curves_draw_each_trained_seat_against_fixed_opponents(tmp_path: Path) -> None:
    rows = [{"step": s, "episode/count": 8.0, "by_role/scientist/parse_failure_rate": 0.1,
             "by_role/lab_manager/parse_failure_rate": 0.3} for s in range(1, 9)]
    for row in rows[3::4]:
        row.update({"val/scientist/reward": 5.0 + row["step"] / 8, "val/scientist/agreement_rate": 0.9,
                    "val/scientist/parse_failure_rate": 0.05, "val/lab_manager/reward": 2.0,
                    "val/lab_manager/agreement_rate": 0.8, "val/lab_manager/parse_failure_rate": 0.2})
    table = seat_table(rows)
    assert table.splitlines()[0].startswith("| step | Scientist reward |") and "Lab Manager reward" in table
    assert len(table.splitlines()) == 4 and "| 4 | 5.500 | 0.900 | 0.050 | 2.000 |" in table

    fig = seat_curves_figure(rows)
    reward, agreement, parse = fig.axes
    assert reward.get_title() == "Each seat against fixed opponents on validation seeds"
    assert [ax.get_ylabel() for ax in fig.axes] == ["own reward vs fixed opponents", "agreement rate",
                                                    "parse failure rate"]
    checks = [4.0, 8.0]
    assert lines(reward) == {"Scientist (validation)": (checks, [5.5, 6.0]),
                             "Lab Manager (validation)": (checks, [2.0, 2.0])}
    assert lines(agreement) == {"Scientist (validation)": (checks, [0.9, 0.9]),
                                "Lab Manager (validation)": (checks, [0.8, 0.8])}
    drawn = lines(parse)
    assert set(drawn) == {"Scientist (validation)", "Lab Manager (validation)", "Scientist (training episodes)",
                          "Lab Manager (training episodes)"}
    assert drawn["Scientist (validation)"] == (checks, [0.05, 0.05])
    xs, ys = drawn["Lab Manager (training episodes)"]  # every step, as a moving average
    assert xs == [float(s) for s in range(1, 9)] and ys == pytest.approx([0.3] * 8)
    colors = {line.get_label(): line.get_color() for line in parse.get_lines()}
    assert colors["Scientist (training episodes)"] == colors["Scientist (validation)"] == ROLE_COLORS["scientist"]
    assert colors["Lab Manager (validation)"] == ROLE_COLORS["lab_manager"]
    assert saved_as(fig, plot_seat_curves(rows, tmp_path / "seats.png"), dpi=120)
    assert seat_curves_figure([{"step": 1, "reward/mean": 1.0}]) is None
    assert plot_seat_curves([{"step": 1, "reward/mean": 1.0}], tmp_path / "none.png") is None
