"""The learning curve read back from a run's metrics.jsonl: steps merged, windows weighted by counts,
the plot written."""

from __future__ import annotations

import json
import math
from pathlib import Path

from training.trainer.curve import curve_table, learning_curve, plot_learning_curve


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


def test_plot_is_written(tmp_path: Path) -> None:
    _write(tmp_path, [{"step": s, "reward/mean": s / 2, "episode/count": 8,
                       "by_difficulty/hard/reward": s / 3, "by_difficulty/hard/count": 4} for s in range(1, 6)])
    out = plot_learning_curve(learning_curve(tmp_path), tmp_path / "curve.png", window=2)
    assert out is not None and out.stat().st_size > 1000
    assert plot_learning_curve([], tmp_path / "none.png") is None


def test_seat_curves_draw_each_trained_seat_against_fixed_opponents(tmp_path):
    from training.trainer.curve import plot_seat_curves, seat_table

    rows = [{"step": s, "episode/count": 8.0, "by_role/scientist/parse_failure_rate": 0.1,
             "by_role/lab_manager/parse_failure_rate": 0.3} for s in range(1, 9)]
    for row in rows[3::4]:
        row.update({"val/scientist/reward": 5.0 + row["step"] / 8, "val/scientist/agreement_rate": 0.9,
                    "val/scientist/parse_failure_rate": 0.05, "val/lab_manager/reward": 2.0,
                    "val/lab_manager/agreement_rate": 0.8, "val/lab_manager/parse_failure_rate": 0.2})
    table = seat_table(rows)
    assert table.splitlines()[0].startswith("| step | Scientist reward |") and "Lab Manager reward" in table
    assert len(table.splitlines()) == 4 and "| 4 | 5.500 | 0.900 | 0.050 | 2.000 |" in table
    assert plot_seat_curves(rows, tmp_path / "seats.png").stat().st_size > 1000
    assert plot_seat_curves([{"step": 1, "reward/mean": 1.0}], tmp_path / "none.png") is None
