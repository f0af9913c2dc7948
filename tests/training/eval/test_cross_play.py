"""``replicalab eval`` with several Lab Manager seats: the cross-play matrix (scripted seats, no model, no Ray)."""

import json

import pytest

from replicalab.seeds import VALIDATION_SEEDS
from training.config.eval import load_eval_config
from training.config.loading import ConfigError

AGENTS = ["scripted:naive", "scripted:reader+defender+asker"]
LABS = ["scripted:thrifty", "scripted:cooperative"]


def test_every_pairing_plays_the_same_seeds_and_reports_both_roles(tmp_path):
    from training.eval.run import run_eval

    cfg = load_eval_config(None, [f"agents={json.dumps(AGENTS)}", f"lab_managers={json.dumps(LABS)}",
                                  "split=validation", "episodes=4", "backend=inprocess", "wandb.mode=disabled",
                                  "bootstrap_samples=200", f"out={tmp_path / 'eval'}"])
    report = run_eval(cfg, progress=False)
    matrix = report["cross_play"]
    assert list(matrix) == LABS and all(list(row) == AGENTS for row in matrix.values())
    for lab in LABS:
        for spec in AGENTS:
            p = matrix[lab][spec]
            assert p["episodes"] == 4 * 9 and 0.0 <= p["agreement_rate"] <= 1.0
            for role in ("scientist", "lab_manager"):
                low, high = p[role]["ci95"]
                assert low <= p[role]["mean"] <= high
    # the per-cell blocks are the first Lab Manager's; the matrix repeats its overall means
    assert report["lab_manager"] == LABS[0]
    for spec in AGENTS:
        assert matrix[LABS[0]][spec]["scientist"]["mean"] == pytest.approx(report["agents"][spec]["overall"]["mean_reward"])
    # the same seeds for every pairing: one EpisodeLog per (seed, cell) in each
    rows = [json.loads(line) for line in (tmp_path / "eval" / "episodes.jsonl").read_text().splitlines()]
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
    md = (tmp_path / "eval" / "report.md").read_text()
    assert "## Cross-play" in md and f"| {AGENTS[1]} | {LABS[1]} |" in md
    assert (tmp_path / "eval" / "cross_play.png").stat().st_size > 1000


@pytest.mark.parametrize("labs, message", [
    ([], "give at least one Lab Manager"),
    (["scripted", "scripted:thrifty"], "each Lab Manager may be named once"),
    (["scripted:naive"], "is not a scripted agent here"),
])
def test_lab_manager_seats_are_checked(labs, message):
    with pytest.raises(ConfigError, match=message):
        load_eval_config(None, [f"lab_managers={json.dumps(labs)}"])
