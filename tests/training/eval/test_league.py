"""The league table (Bradley-Terry ratings) and exploitability of ``replicalab eval``: the fit on synthetic
comparisons whose answer is known, and both on scripted cross-play (no model, no Ray), with the report's tables
and ``league.png`` drawing what the report holds."""

from __future__ import annotations

import json
import math
import random
import statistics

import pytest
from figures import saved_as, tick_labels
from scripted_play import CELLS, LABS, SAMPLES, SEEDS, cross_play, play, shifted

from replicalab.metrics import role_reward
from training.config.eval import load_eval_config
from training.eval.exploitability import exploitability
from training.eval.league import (ELO_SCALE, MEAN_RATING, TIE, WIN, Comparison, comparisons, league,
                                  league_tables)

SCIENTISTS = ["scripted:naive", "scripted:reader", "scripted:reader+defender+asker"]
ORACLE = "scripted:oracle"


@pytest.fixture(scope="module")
def played() -> dict:
    """Scripted cross-play: every Scientist of ``SCIENTISTS`` against every Lab Manager of ``LABS``."""
    return cross_play(SCIENTISTS)


def synthetic(strengths: dict[str, float], seeds: int, rng_seed: int = 0) -> list[Comparison]:
    """Every pair of seats on ``seeds`` episodes of each of 3 strata, won with Bradley-Terry probability."""
    rng = random.Random(rng_seed)
    seats = list(strengths)
    found = []
    for seed in range(seeds):
        for cell in ("a", "b", "c"):
            for i, first in enumerate(seats):
                for second in seats[i + 1:]:
                    p = 1 / (1 + math.exp(strengths[second] - strengths[first]))
                    found.append(Comparison((seed, cell, "easy"), first, second, WIN if rng.random() < p else 0.0))
    return found


def exact(strengths: dict[str, float], games: int) -> list[Comparison]:
    """``games`` episodes for every pair of seats, won in the share Bradley-Terry gives (rounded): the data whose
    fit is the true strengths (up to the rounding and the prior)."""
    seats = list(strengths)
    found = []
    for i, first in enumerate(seats):
        for second in seats[i + 1:]:
            wins = round(games / (1 + math.exp(strengths[second] - strengths[first])))
            found += [Comparison((s, "a", "easy"), first, second, WIN if s < wins else 0.0) for s in range(games)]
    return found


def ratings(rows: list[dict]) -> dict[str, float]:
    return {r["seat"]: r["rating"] for r in rows}


def test_bradley_terry_recovers_known_strengths():
    """Outcomes in the exact Bradley-Terry shares: each unit of log-strength is ELO_SCALE / ln 10 points."""
    strengths = {"weak": -1.0, "fair": 0.0, "good": 1.0, "best": 2.0}
    rows = league(exact(strengths, games=2000), list(strengths), SAMPLES)
    assert [r["seat"] for r in rows] == ["best", "good", "fair", "weak"]
    assert statistics.fmean(r["rating"] for r in rows) == pytest.approx(MEAN_RATING)
    mean_strength = statistics.fmean(strengths.values())
    for r in rows:
        assert r["rating"] == pytest.approx(
            MEAN_RATING + ELO_SCALE * (strengths[r["seat"]] - mean_strength) / math.log(10), abs=2.0)


def test_the_league_does_not_depend_on_the_order_seats_come_in():
    strengths = {"weak": -1.0, "fair": 0.0, "good": 1.0, "best": 2.0}
    found = synthetic(strengths, seeds=40)
    rows = league(found, list(strengths), SAMPLES)
    assert [r["seat"] for r in rows] == ["best", "good", "fair", "weak"]
    # the seats listed in another order, each comparison seen from the other side: the same league
    flipped = [Comparison(c.episode, c.second, c.first, 1.0 - c.score) for c in reversed(found)]
    again = league(flipped, ["fair", "best", "weak", "good"], SAMPLES)
    assert ratings(again) == pytest.approx(ratings(rows), abs=1e-6)
    intervals = {r["seat"]: r["ci95"] for r in rows}
    assert [end for r in again for end in r["ci95"]] == pytest.approx(
        [end for r in again for end in intervals[r["seat"]]], abs=1e-6)
    assert {r["seat"]: r["comparisons"] for r in again} == {r["seat"]: r["comparisons"] for r in rows}
    assert all(r["comparisons"] == 3 * 40 * 3 for r in rows)  # 3 strata x 40 episodes x 3 rivals


def test_a_seat_that_wins_everything_gets_a_finite_top_rating():
    found = [Comparison((s, "a", "easy"), "champion", rival, WIN) for s in range(50) for rival in ("x", "y")]
    found += [Comparison((s, "a", "easy"), "x", "y", TIE) for s in range(50)]
    rows = league(found, ["x", "champion", "y"], SAMPLES)
    top = rows[0]
    assert top["seat"] == "champion" and top["win_share"] == 1.0
    assert all(math.isfinite(r["rating"]) and all(map(math.isfinite, r["ci95"])) for r in rows)
    assert ratings(rows)["x"] == pytest.approx(ratings(rows)["y"])
    # more wins, a higher (still finite) rating: the prior only keeps it finite
    more = [Comparison((s + 50, c.episode[1], c.episode[2]), c.first, c.second, c.score) for s, c in enumerate(found)]
    assert math.isfinite(ratings(league(found + more, ["x", "champion", "y"], SAMPLES))["champion"])
    assert ratings(league(found + more, ["x", "champion", "y"], SAMPLES))["champion"] > top["rating"]


def test_ties_count_half():
    ties = [Comparison((s, "a", "easy"), "x", "y", TIE) for s in range(20)]
    rows = league(ties, ["x", "y"], SAMPLES)
    assert all(r["rating"] == pytest.approx(MEAN_RATING) and r["win_share"] == 0.5 for r in rows)
    # a win and a loss weigh what two ties do
    split = [Comparison((s, "a", "easy"), "x", "y", WIN if s % 2 else 0.0) for s in range(20)]
    assert ratings(league(split, ["x", "y"], SAMPLES)) == pytest.approx(ratings(rows))
    # x winning 3 of every 4 equals x winning 1 and drawing 1 of every 2
    three = [Comparison((s, "a", "easy"), "x", "y", 0.0 if s % 4 == 0 else WIN) for s in range(40)]
    half = [Comparison((s, "a", "easy"), "x", "y", WIN if s % 2 else TIE) for s in range(40)]
    assert ratings(league(three, ["x", "y"], SAMPLES)) == pytest.approx(ratings(league(half, ["x", "y"], SAMPLES)))


def test_equal_rewards_on_an_episode_are_a_tie(played):
    twin = {("scripted:thrifty", "scripted:naive"): played["scripted:thrifty", "scripted:naive"],
            ("scripted:thrifty", "model:copy"): played["scripted:thrifty", "scripted:naive"]}
    found = comparisons(twin, "scientist")
    assert len(found) == len(SEEDS) * len(CELLS) and {c.score for c in found} == {TIE}
    assert "lab_manager" not in league_tables(twin, SAMPLES)  # one Lab Manager: no league of that role


def test_intervals_hold_the_estimate_and_narrow_with_more_episodes():
    strengths = {"x": 0.0, "y": 0.5, "z": 1.0}
    few = league(synthetic(strengths, seeds=10), list(strengths), SAMPLES)
    many = league(synthetic(strengths, seeds=160), list(strengths), SAMPLES)
    for rows in (few, many):
        assert all(r["ci95"][0] <= r["rating"] <= r["ci95"][1] for r in rows)
    width = {r["seat"]: r["ci95"][1] - r["ci95"][0] for r in few}
    assert all(r["ci95"][1] - r["ci95"][0] < width[r["seat"]] / 2 for r in many)
    # seeded: the same comparisons give the same intervals
    assert league(synthetic(strengths, seeds=10), list(strengths), SAMPLES) == few


def test_the_league_pools_every_opponent_and_counts_wins_by_own_reward(played):
    tables = league_tables(played, SAMPLES)
    assert list(tables) == ["scientist", "lab_manager"]
    episodes = len(SEEDS) * len(CELLS)
    # each Scientist meets each other one on every episode, once per Lab Manager
    assert {r["seat"]: r["comparisons"] for r in tables["scientist"]} == {
        s: (len(SCIENTISTS) - 1) * len(LABS) * episodes for s in SCIENTISTS}
    assert {r["seat"]: r["comparisons"] for r in tables["lab_manager"]} == {lab: len(SCIENTISTS) * episodes
                                                                            for lab in LABS}
    for role, rows in tables.items():
        assert [r["rating"] for r in rows] == sorted((r["rating"] for r in rows), reverse=True)
        # the win shares, recounted from the episodes: more reward wins, equal is half
        for r in rows:
            credit = 0.0
            for (lab, sci), logs in played.items():
                mine = (sci if role == "scientist" else lab) == r["seat"]
                if not mine:
                    continue
                for rival_key, rival_logs in played.items():
                    same_opponent = rival_key[0] == lab if role == "scientist" else rival_key[1] == sci
                    if rival_key == (lab, sci) or not same_opponent:
                        continue
                    for a, b in zip(logs, rival_logs):
                        diff = role_reward(a, role) - role_reward(b, role)
                        credit += WIN if diff > 0 else TIE if diff == 0 else 0.0
            assert r["win_share"] == pytest.approx(credit / r["comparisons"])


def test_exploitability_picks_the_opponent_that_earns_most(played):
    """Non-scripted seats (scripted episodes relabelled ``model:``) of both roles against scripted opponents."""
    seat_logs = {(lab, "model:skilled"): played[lab, "scripted:reader+defender+asker"] for lab in LABS}
    seat_logs.update({("model:coop", sci): played["scripted:cooperative", sci] for sci in SCIENTISTS})
    report = exploitability({**played, **seat_logs}, SAMPLES)
    (sci_row,), (lab_row,) = report["scientist"], report["lab_manager"]
    # the Scientist under test: the Lab Manager earning most against it, compared with the naive reference
    lab_means = {lab: statistics.fmean(role_reward(x, "lab_manager") for x in seat_logs[lab, "model:skilled"])
                 for lab in LABS}
    best = max(lab_means, key=lab_means.get)
    assert sci_row["seat"] == "model:skilled" and sci_row["opponents"] == LABS and sci_row["best_response"] == best
    assert sci_row["opponent_reward"]["mean"] == pytest.approx(lab_means[best])
    assert sci_row["seat_reward"]["mean"] == pytest.approx(
        statistics.fmean(role_reward(x, "scientist") for x in seat_logs[best, "model:skilled"]))
    naive = statistics.fmean(role_reward(x, "lab_manager") for x in played[best, "scripted:naive"])
    assert sci_row["reference"] == "scripted:naive"
    assert sci_row["margin"]["mean"] == pytest.approx(lab_means[best] - naive)
    for block in ("opponent_reward", "seat_reward", "margin"):
        low, high = sci_row[block]["ci95"]
        assert low <= sci_row[block]["mean"] <= high
    # the Lab Manager under test: the Scientist earning most against it, compared with the thrifty reference
    sci_means = {s: statistics.fmean(role_reward(x, "scientist") for x in seat_logs["model:coop", s])
                 for s in SCIENTISTS}
    best = max(sci_means, key=sci_means.get)
    assert lab_row["best_response"] == best and lab_row["reference"] == "scripted:thrifty"
    thrifty = statistics.fmean(role_reward(x, "scientist") for x in played["scripted:thrifty", best])
    assert lab_row["margin"]["mean"] == pytest.approx(sci_means[best] - thrifty)
    assert lab_row["episodes"] == len(SEEDS) * len(CELLS)


@pytest.mark.parametrize("delta", [1.5, -1.5, 0.0])
def test_the_margin_sign_is_the_concession_over_the_reference(played, delta):
    """A Lab Manager that gives every Scientist ``delta`` more than the thrifty one does: its margin is exactly
    ``delta`` (paired, so the interval is a point), and the best response is the thrifty one's."""
    thrifty = {sci: played["scripted:thrifty", sci] for sci in SCIENTISTS}
    seat = {("model:x", sci): shifted(thrifty[sci], "scientist", delta) for sci in SCIENTISTS}
    (row,) = exploitability({**{("scripted:thrifty", s): v for s, v in thrifty.items()}, **seat},
                            SAMPLES)["lab_manager"]
    means = {sci: statistics.fmean(role_reward(x, "scientist") for x in logs) for sci, logs in thrifty.items()}
    assert row["best_response"] == max(means, key=means.get)
    assert row["margin"]["mean"] == pytest.approx(delta)
    assert row["margin"]["ci95"] == pytest.approx([delta, delta])


def test_without_the_reference_there_is_no_margin_and_scripted_seats_are_not_tested(played):
    only_coop = {("scripted:cooperative", sci): played["scripted:cooperative", sci] for sci in SCIENTISTS}
    assert exploitability(only_coop, SAMPLES) == {}  # every seat scripted
    relabelled = {("model:coop", sci): logs for (_, sci), logs in only_coop.items()}
    (row,) = exploitability(relabelled, SAMPLES)["lab_manager"]
    assert row["reference"] is None and row["margin"] is None
    # the default Lab Manager spelled plainly is the reference too
    plain = {("scripted", sci): played["scripted:thrifty", sci] for sci in SCIENTISTS}
    (row,) = exploitability({**relabelled, **plain}, SAMPLES)["lab_manager"]
    assert row["reference"] == "scripted" and row["opponents"] == SCIENTISTS


@pytest.fixture(scope="module")
def report(played, tmp_path_factory) -> dict:
    """``build_report`` of the scripted cross-play with a ``model:`` Scientist (naive's episodes relabelled)."""
    from training.eval.run import build_report

    games = {**played, ("scripted:thrifty", ORACLE): play(ORACLE, "scripted:thrifty")}
    games.update({(lab, "model:x"): played[lab, "scripted:naive"] for lab in LABS})
    cfg = load_eval_config(None, [f"agents={json.dumps([*SCIENTISTS, 'model:x'])}", f"lab_managers={json.dumps(LABS)}",
                                  "split=validation", f"episodes={len(SEEDS)}", f"bootstrap_samples={SAMPLES}",
                                  f"out={tmp_path_factory.mktemp('league')}"])
    return build_report(cfg, games)


def test_the_report_holds_the_league_and_exploitability_tables(report):
    from training.eval.report import report_markdown

    assert ORACLE not in {r["seat"] for r in report["league"]["scientist"]}  # the reference agent is not rated
    assert {r["seat"] for r in report["league"]["scientist"]} == {*SCIENTISTS, "model:x"}
    (row,) = report["exploitability"]["scientist"]
    assert row["seat"] == "model:x" and row["margin"]["mean"] == 0.0  # naive's own episodes: no margin
    assert "lab_manager" not in report["exploitability"]  # both Lab Managers scripted
    md = report_markdown(json.loads(json.dumps(report)))
    assert "## League" in md and "### Scientist" in md and "### Lab Manager" in md and "## Exploitability" in md
    assert "| seat | rating | 95% interval | comparisons | win share |" in md
    for role, rows in report["league"].items():
        for r in rows:
            assert (f"| {r['seat']} | {r['rating']:.0f} | [{r['ci95'][0]:.0f}, {r['ci95'][1]:.0f}] | "
                    f"{r['comparisons']} | {r['win_share']:.3f} |") in md
    assert f"| Scientist | model:x | {row['best_response']} | {row['opponent_reward']['mean']:.2f} " in md


def test_the_league_figure_draws_each_role(report, tmp_path):
    from training.eval.report import plot_report
    from training.eval.report_league import RATING_LABEL, league_figure

    fig = league_figure(report)
    assert [ax.get_title() for ax in fig.axes] == ["Scientist league", "Lab Manager league"]
    assert fig.get_suptitle() == f"League on validation seeds ({report['seed_range']})"
    for ax, rows in zip(fig.axes, report["league"].values()):
        assert tick_labels(ax, "y") == [r["seat"] for r in rows]
        assert ax.get_xlabel() == RATING_LABEL
        (points,) = ax.containers  # the errorbar: a point per seat, whiskers spanning its interval
        assert points.get_label() == "rating"
        assert list(points.lines[0].get_xdata()) == [r["rating"] for r in rows]
        assert list(points.lines[0].get_ydata()) == list(range(len(rows)))
        whiskers = [end for a, b in points.lines[2][0].get_segments() for end in sorted((a[0], b[0]))]
        assert whiskers == pytest.approx([end for r in rows for end in r["ci95"]])
        assert ax.yaxis_inverted()  # the best at the top
    paths = plot_report(report, tmp_path)
    assert tmp_path / "league.png" in paths and saved_as(fig, tmp_path / "league.png", dpi=120)
