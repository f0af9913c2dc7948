"""``replicalab eval`` with several Lab Manager seats: the cross-play matrix and the league (scripted seats, no model,
no Ray), and the report's figures drawing what the report holds."""

import json

import pytest
from figures import bars, saved_as, tick_labels

from replicalab.seeds import VALIDATION_SEEDS
from training.config.eval import load_eval_config
from training.config.loading import ConfigError

AGENTS = ["scripted:naive", "scripted:reader+defender+asker"]
LABS = ["scripted:thrifty", "scripted:cooperative"]


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    """(report, its output folder) of one cross-play evaluation: 2 agents x 2 Lab Managers, 4 validation seeds."""
    from training.eval.run import run_eval

    out = tmp_path_factory.mktemp("cross-play") / "eval"
    cfg = load_eval_config(None, [f"agents={json.dumps(AGENTS)}", f"lab_managers={json.dumps(LABS)}",
                                  "split=validation", "episodes=4", "backend=inprocess", "wandb.mode=disabled",
                                  "bootstrap_samples=200", f"out={out}"])
    return run_eval(cfg, progress=False), out


def test_every_pairing_plays_the_same_seeds_and_reports_both_roles(evaluated):
    report, out = evaluated
    matrix = report["cross_play"]
    assert list(matrix) == LABS and all(list(row) == AGENTS for row in matrix.values())
    for lab in LABS:
        for spec in AGENTS:
            p = matrix[lab][spec]
            assert p["episodes"] == 4 * 9 and 0.0 <= p["agreement_rate"] <= 1.0
            for role in ("scientist", "lab_manager"):
                low, high = p[role]["ci95"]
                assert low <= p[role]["mean"] <= high
                assert p[role]["invalid_action_rate"] == 0.0  # scripted seats always speak the game
    # the per-cell blocks are the first Lab Manager's; the matrix repeats its overall means
    assert report["lab_manager"] == LABS[0]
    for spec in AGENTS:
        assert matrix[LABS[0]][spec]["scientist"]["mean"] == pytest.approx(report["agents"][spec]["overall"]["mean_reward"])
    # the same seeds for every pairing: one EpisodeLog per (seed, cell) in each
    rows = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    by_label: dict[str, list] = {}
    for row in rows:
        by_label.setdefault(row["role"], []).append((row["log"]["seed"], row["log"]["scenario_template"],
                                                     row["log"]["difficulty"]))
    pairs = [spec if lab == LABS[0] else f"{spec} vs {lab}" for lab in LABS for spec in AGENTS]
    assert set(pairs) <= set(by_label) and len({tuple(v) for v in by_label.values()}) == 1  # the oracle reference too
    assert {s for s, _, _ in next(iter(by_label.values()))} == set(VALIDATION_SEEDS[:4])
    # the ranking flips with the Scientist: the thrifty lab earns more against naive, less against the skilled one
    thrifty, cooperative = (matrix[lab] for lab in LABS)
    assert thrifty[AGENTS[0]]["lab_manager"]["mean"] > cooperative[AGENTS[0]]["lab_manager"]["mean"]
    assert thrifty[AGENTS[1]]["lab_manager"]["mean"] < cooperative[AGENTS[1]]["lab_manager"]["mean"]
    md = (out / "report.md").read_text()
    assert "## Cross-play" in md and f"| {AGENTS[1]} | {LABS[1]} |" in md


def test_the_real_run_rates_both_roles_in_a_league(evaluated):
    """report.json's league: both roles (two seats each; the oracle reference is not an agent, so not rated), every
    seat compared with its rival on each episode against each opponent; league.png beside the other plots; no
    exploitability without a non-scripted seat."""
    report, out = evaluated
    saved = json.loads((out / "report.json").read_text())
    assert saved["league"] == report["league"] and list(saved["league"]) == ["scientist", "lab_manager"]
    for role, seats in (("scientist", AGENTS), ("lab_manager", LABS)):
        rows = saved["league"][role]
        assert sorted(r["seat"] for r in rows) == sorted(seats)
        assert all(r["comparisons"] == 2 * 4 * 9 for r in rows)  # two opponents x 36 episodes
        assert sum(r["win_share"] for r in rows) == pytest.approx(1.0)
        assert rows[0]["rating"] >= rows[1]["rating"]
    assert "exploitability" not in saved
    assert (out / "league.png").is_file() and "## League" in (out / "report.md").read_text()


def test_the_cross_play_figure_is_the_matrix(evaluated):
    """One heatmap per role: agents down, Lab Managers across, each cell written with its pairing's mean."""
    from training.eval.report import cross_play_figure

    report, out = evaluated
    matrix = report["cross_play"]
    fig = cross_play_figure(report)
    assert len(fig.axes) == 4  # two heatmaps, each with its colorbar
    assert fig.get_suptitle() == f"Cross-play on validation seeds ({report['seed_range']})"
    for ax, role, title in zip(fig.axes, ("scientist", "lab_manager"), ("Scientist reward", "Lab Manager reward")):
        assert ax.get_title() == title
        assert tick_labels(ax, "x") == LABS and tick_labels(ax, "y") == AGENTS
        means = [[matrix[lab][spec][role]["mean"] for lab in LABS] for spec in AGENTS]
        assert ax.images[0].get_array().tolist() == means
        assert [t.get_text() for t in ax.texts] == [f"{m:.2f}" for row in means for m in row]
    assert saved_as(fig, out / "cross_play.png", dpi=120)


def test_the_report_figures_draw_every_agent_in_every_cell(evaluated):
    """reward_by_cell.png: one bar per agent and cell at its mean reward; components.png: one bar per agent and
    judge component at its overall value."""
    from training.eval.report import COMPONENT_PARTS, components_figure, reward_by_cell_figure

    report, out = evaluated
    assert len(report["cells"]) == 9
    fig = reward_by_cell_figure(report)
    (ax,) = fig.axes
    assert ax.get_title() == "Scientist reward by cell (validation seeds)"
    assert ax.get_ylabel() == "mean reward (95% CI)"
    assert tick_labels(ax) == [cell.replace("/", "\n") for cell in report["cells"]]
    assert bars(ax) == {spec: [report["agents"][spec]["by_cell"][cell]["mean_reward"] for cell in report["cells"]]
                        for spec in AGENTS}
    assert saved_as(fig, out / "reward_by_cell.png", dpi=120)
    fig = components_figure(report)
    (ax,) = fig.axes
    assert ax.get_title() == "Judge components and agreement, all cells"
    assert tick_labels(ax) == list(COMPONENT_PARTS)
    assert bars(ax) == {spec: [report["agents"][spec]["overall"][part] for part in COMPONENT_PARTS] for spec in AGENTS}
    assert saved_as(fig, out / "components.png", dpi=120)


@pytest.mark.parametrize("labs, message", [
    ([], "give at least one Lab Manager"),
    (["scripted", "scripted:thrifty"], "each Lab Manager may be named once"),
    (["scripted:naive"], "is not a scripted agent here"),
])
def test_lab_manager_seats_are_checked(labs, message):
    with pytest.raises(ConfigError, match=message):
        load_eval_config(None, [f"lab_managers={json.dumps(labs)}"])


def test_a_pairing_counts_each_roles_invalid_turns():
    """The random Scientist's rejected turns are the Scientist's share, and the scripted lab's is zero."""
    from replicalab import ReplicaLabEnv
    from replicalab.episode import run_episode
    from replicalab.seats import scripted_agent
    from training.eval.run import pairing

    logs = [run_episode(ReplicaLabEnv(), scripted_agent("scientist", "random", seed, "cell_biology", "hard"),
                        "thrifty", seed=seed, template="cell_biology", difficulty="hard")
            for seed in VALIDATION_SEEDS[:6]]
    mine = [t for log in logs for t in log.turns if t.role == "scientist"]
    want = sum(t.error is not None for t in mine) / len(mine)
    p = pairing(logs, samples=200)
    assert p["scientist"]["invalid_action_rate"] == pytest.approx(want) and want > 0
    assert p["lab_manager"]["invalid_action_rate"] == 0.0
