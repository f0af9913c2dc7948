"""The gains table of ``replicalab eval``: each non-scripted seat's paired gain over a baseline seat of its role,
opponent by opponent, on scripted cross-play (episodes relabelled ``model:``; no model, no Ray)."""

from __future__ import annotations

import json
import statistics

import pytest
from scripted_play import CELLS, LABS, SAMPLES, SEEDS, cross_play, play, shifted

from replicalab import DIFFICULTIES
from replicalab.metrics import role_reward
from training.config.eval import load_eval_config
from training.config.loading import ConfigError
from training.eval.gains import ABOVE, BELOW, NOT_APART, seat_gains

SCIENTISTS = ["scripted:naive", "scripted:reader+defender+asker"]


@pytest.fixture(scope="module")
def played() -> dict:
    return cross_play(SCIENTISTS)


@pytest.mark.parametrize("delta, side", [(0.75, ABOVE), (-0.75, BELOW), (0.0, NOT_APART)])
def test_a_seat_that_earns_delta_more_on_every_episode_gains_exactly_delta(played, delta, side):
    """Paired by episode, a constant shift is the gain with a point interval, against every opponent."""
    base = {(lab, "model:warm"): played[lab, "scripted:naive"] for lab in LABS}
    seat = {(lab, "model:trained"): shifted(played[lab, "scripted:naive"], "scientist", delta) for lab in LABS}
    table = seat_gains({**base, **seat}, "model:warm", SAMPLES)
    assert list(table) == ["scientist"]  # no Lab Manager seat is the baseline
    rows = table["scientist"]
    assert [(r["seat"], r["opponent"]) for r in rows] == [("model:trained", lab) for lab in LABS]
    for r in rows:
        assert r["gain"]["mean"] == pytest.approx(delta)
        assert r["gain"]["ci95"] == pytest.approx([delta, delta])
        assert r["seat_reward"] - r["baseline_reward"] == pytest.approx(delta)
        assert r["apart"] == side and r["episodes"] == len(SEEDS) * len(CELLS)


def test_gains_are_mean_paired_differences_of_each_roles_own_reward(played):
    """Both roles at once: a skilled model Scientist over a naive baseline, and a model Lab Manager over a baseline
    Lab Manager; scripted seats get no row, and an opponent only one of the two played is left out."""
    games = {(lab, "model:warm"): played[lab, "scripted:naive"] for lab in LABS}
    games.update({(lab, "model:skilled"): played[lab, "scripted:reader+defender+asker"] for lab in LABS[:1]})
    games.update({("model:warm", sci): played["scripted:thrifty", sci] for sci in SCIENTISTS})
    games.update({("model:lab", sci): played["scripted:cooperative", sci] for sci in SCIENTISTS})
    games.update({(lab, sci): played[lab, sci] for lab in LABS for sci in SCIENTISTS})
    table = seat_gains(games, "model:warm", SAMPLES)
    (sci_row,) = table["scientist"]  # model:skilled played only the thrifty lab; scripted Scientists get none
    assert (sci_row["seat"], sci_row["opponent"]) == ("model:skilled", "scripted:thrifty")
    skilled, naive = played[LABS[0], "scripted:reader+defender+asker"], played[LABS[0], "scripted:naive"]
    want = statistics.fmean(role_reward(a, "scientist") - role_reward(b, "scientist") for a, b in zip(skilled, naive))
    assert sci_row["gain"]["mean"] == pytest.approx(want) and want != 0
    low, high = sci_row["gain"]["ci95"]
    assert low <= want <= high
    lab_rows = table["lab_manager"]
    assert [(r["seat"], r["opponent"]) for r in lab_rows] == [("model:lab", sci) for sci in SCIENTISTS]
    for r, sci in zip(lab_rows, SCIENTISTS):
        coop, thrifty = played["scripted:cooperative", sci], played["scripted:thrifty", sci]
        assert r["gain"]["mean"] == pytest.approx(statistics.fmean(
            role_reward(a, "lab_manager") - role_reward(b, "lab_manager") for a, b in zip(coop, thrifty)))
        assert r["baseline_reward"] == pytest.approx(statistics.fmean(role_reward(b, "lab_manager") for b in thrifty))
    assert seat_gains(games, "model:absent", SAMPLES) == {}


def test_the_report_holds_the_gains_of_its_baseline(played, tmp_path):
    from training.eval.report import report_markdown
    from training.eval.run import ORACLE, build_report

    games = {**played, ("scripted:thrifty", ORACLE): play(ORACLE, "scripted:thrifty")}
    games.update({(lab, "model:x"): shifted(played[lab, "scripted:naive"], "scientist", 1.0) for lab in LABS})
    games.update({(lab, "model:warm"): played[lab, "scripted:naive"] for lab in LABS})
    agents = [*SCIENTISTS, "model:x", "model:warm"]
    cfg = load_eval_config(None, [f"agents={json.dumps(agents)}", f"lab_managers={json.dumps(LABS)}",
                                  "baseline=model:warm", "split=validation", f"episodes={len(SEEDS)}",
                                  f"bootstrap_samples={SAMPLES}", f"out={tmp_path}"])
    report = json.loads(json.dumps(build_report(cfg, games)))
    assert report["baseline"] == "model:warm"
    rows = report["gains"]["scientist"]
    assert [r["opponent"] for r in rows] == LABS and all(r["apart"] == ABOVE for r in rows)
    md = report_markdown(report)
    assert "## Gains over model:warm" in md
    r = rows[0]
    assert (f"| Scientist | model:x | {LABS[0]} | {r['seat_reward']:.2f} | {r['baseline_reward']:.2f} | "
            f"1.00 [1.00, 1.00] | above | {r['episodes']} |") in md
    from figures import saved_as, tick_labels

    from training.eval.report import plot_report
    from training.eval.report_league import GAIN_LABEL, gains_figure

    fig = gains_figure(report)
    (ax,) = fig.axes
    assert ax.get_title() == "Scientist: gain over model:warm" and ax.get_xlabel() == GAIN_LABEL
    assert tick_labels(ax, "y") == [f"model:x\nvs {lab}" for lab in LABS]
    (points,) = ax.containers  # a point per row, whiskers spanning its interval
    assert list(points.lines[0].get_xdata()) == pytest.approx([r["gain"]["mean"] for r in rows])
    whiskers = [end for a, b in points.lines[2][0].get_segments() for end in sorted((a[0], b[0]))]
    assert whiskers == pytest.approx([end for r in rows for end in r["gain"]["ci95"]])
    assert ax.yaxis_inverted()  # the table's first row at the top
    paths = plot_report(report, tmp_path)
    assert tmp_path / "gains.png" in paths and saved_as(fig, tmp_path / "gains.png", dpi=120)
    without = build_report(cfg.model_copy(update={"baseline": None}), games)
    assert "gains" not in without and "baseline" not in without
    assert "## Gains" not in report_markdown(without)


def test_a_baseline_that_is_not_a_seat_is_a_one_line_error():
    with pytest.raises(ConfigError, match="baseline 'model:elsewhere' is not among the agents or lab_managers"):
        load_eval_config(None, ["baseline=model:elsewhere"])
    cfg = load_eval_config(None, ['lab_managers=["scripted:thrifty", "model:m"]', "baseline=model:m"])
    assert cfg.baseline == "model:m"


def test_an_evaluation_output_reads_back_as_the_pairings_it_played(tmp_path):
    """``played_in`` of ``run_eval`` outputs (scripted seats, in-process): two parts of a matrix read back as the
    whole one's pairings, each with the episodes the report's cross-play was computed from."""
    from training.eval.gains import played_in
    from training.eval.run import run_eval

    def evaluate(name: str, agents: list[str], labs: list[str]) -> dict:
        cfg = load_eval_config(None, [f"agents={json.dumps(agents)}", f"lab_managers={json.dumps(labs)}",
                                      "split=validation", "episodes=2", "templates=[cell_biology]",
                                      f"bootstrap_samples={SAMPLES}", "wandb.mode=disabled",
                                      f"out={tmp_path / name}"])
        return run_eval(cfg, progress=False)

    whole = evaluate("whole", SCIENTISTS, LABS)
    evaluate("first", SCIENTISTS[:1], LABS)
    evaluate("second", SCIENTISTS[1:], LABS[::-1])
    (split, seeds), played = played_in(tmp_path / "whole")
    assert split == "validation" and list(seeds) == whole["seeds"]
    assert sorted(played) == sorted((lab, sci) for lab in LABS for sci in SCIENTISTS)  # no oracle
    for (lab, sci), logs in played.items():
        assert len(logs) == len(seeds) * len(DIFFICULTIES)
        assert statistics.fmean(role_reward(x, "lab_manager") for x in logs) == pytest.approx(
            whole["cross_play"][lab][sci]["lab_manager"]["mean"])
    parts = {**played_in(tmp_path / "first")[1], **played_in(tmp_path / "second")[1]}
    assert sorted(parts) == sorted(played)
    for key, logs in played.items():
        assert [x.model_dump() for x in parts[key]] == [x.model_dump() for x in logs]
