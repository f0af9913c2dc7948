"""episode_metrics on real EpisodeLogs, and RunLogger's JSONL + offline W&B output read back with the SDK."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from replicalab import ReplicaLabEnv, run_episode
from replicalab.agents import SKILLS, NaiveScientist, RandomScientist, SkilledScientist
from replicalab.metrics import episode_metrics
from replicalab.models import EpisodeLog, InvalidAction, ScientistAction
from training.config.train import load_train_config
from training.tracking import (
    EPISODES_FILE,
    METRICS_FILE,
    SUMMARY_FILE,
    TRANSCRIPT_TABLE_KEY,
    RunLogger,
)

MAX_ROUNDS = 3


def garbage_scientist(obs) -> InvalidAction:
    """Unparseable output every turn: two invalid turns end the episode."""
    return InvalidAction(role="scientist", error="x", raw_text="not json")


def premature_accept(obs) -> ScientistAction:
    """Valid JSON, rejected by the env (nothing to accept): invalid but not a parse failure."""
    return ScientistAction(action_type="accept")


def questioner(obs) -> ScientistAction:
    """Asks forever: valid turns, no agreement, the episode runs out of rounds."""
    return ScientistAction(action_type="request_info", questions=["What is the budget?"])


def _play(agent, seed: int, difficulty: str, template: str = "cell_biology") -> EpisodeLog:
    return run_episode(ReplicaLabEnv(max_rounds=MAX_ROUNDS), agent, seed=seed, template=template,
                       difficulty=difficulty)


@pytest.fixture(scope="module")
def logs() -> list[EpisodeLog]:
    return [
        _play(SkilledScientist(SKILLS), 1, "easy"), _play(NaiveScientist(), 2, "hard", "ml_benchmark"),
        _play(RandomScientist(3), 3, "medium"), _play(garbage_scientist, 4, "hard"),
        _play(premature_accept, 5, "easy"), _play(questioner, 6, "medium"),
    ]


def test_rates_match_the_turn_records(logs: list[EpisodeLog]) -> None:
    m = episode_metrics(logs)
    turns = sum(len(log.turns) for log in logs)
    invalid = sum(sum(log.invalid_turns.values()) for log in logs)  # the env's own count: both kinds
    parse_failures = sum(t.action is None for log in logs for t in log.turns)
    assert parse_failures == 2 and invalid >= 4  # garbage: 2 unparseable; premature accept: 2 rejected
    assert m["episode/invalid_action_rate"] == pytest.approx(invalid / turns)
    assert m["episode/parse_failure_rate"] == pytest.approx(parse_failures / turns)
    assert m["episode/agreement_rate"] == pytest.approx(sum(log.agreement_reached for log in logs) / len(logs))
    assert m["episode/timeout_rate"] == pytest.approx(sum(log.truncated for log in logs) / len(logs))
    assert 0 < m["episode/timeout_rate"] < 1  # the questioner runs out of rounds, the others do not
    assert m["episode/rounds"] == pytest.approx(statistics.mean(log.rounds_used for log in logs))
    assert m["episode/count"] == len(logs)
    assert m["by_role/lab_manager/invalid_action_rate"] == 0.0
    assert m["by_role/scientist/parse_failure_rate"] > m["episode/parse_failure_rate"]


def test_reward_components_and_penalties(logs: list[EpisodeLog]) -> None:
    m = episode_metrics(logs)
    rewards = [log.total_reward for log in logs]
    assert m["reward/mean"] == pytest.approx(statistics.mean(rewards))
    assert m["reward/std"] == pytest.approx(statistics.pstdev(rewards))
    for name in ("rigor", "feasibility", "fidelity", "efficiency_bonus", "communication_bonus"):
        assert m[f"reward/{name}"] == pytest.approx(statistics.mean(getattr(l.reward_breakdown, name) for l in logs))
    core = [10 * b.rigor * b.feasibility * b.fidelity for b in (l.reward_breakdown for l in logs)]
    assert m["reward/core"] == pytest.approx(statistics.mean(core))
    names = {k for log in logs for k in log.reward_breakdown.penalties}
    assert {"no_agreement", "invalid_turns"} <= names
    assert {k for k in m if k.startswith("penalty/")} == {f"penalty/{n}" for n in names}
    for n in names:  # absent penalties count as 0
        expected = sum(log.reward_breakdown.penalties.get(n, 0.0) for log in logs) / len(logs)
        assert m[f"penalty/{n}"] == pytest.approx(expected)


def test_by_difficulty(logs: list[EpisodeLog]) -> None:
    m = episode_metrics(logs)
    for d in ("easy", "medium", "hard"):
        group = [log for log in logs if log.difficulty == d]
        assert m[f"by_difficulty/{d}/reward"] == pytest.approx(statistics.mean(l.total_reward for l in group))
        assert m[f"by_difficulty/{d}/agreement_rate"] == pytest.approx(
            statistics.mean(float(l.agreement_reached) for l in group))
        assert m[f"by_difficulty/{d}/count"] == len(group)
    assert episode_metrics([]) == {}
    assert all(isinstance(v, float) for v in m.values())


# ----- RunLogger ---------------------------------------------------------------------------------
@pytest.fixture()
def wandb_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for var, sub in (("WANDB_DIR", "wandb-dir"), ("WANDB_DATA_DIR", "wandb-data"),
                     ("WANDB_CACHE_DIR", "wandb-cache"), ("WANDB_CONFIG_DIR", "wandb-config")):
        monkeypatch.setenv(var, str(tmp_path / sub))
    monkeypatch.setenv("WANDB_ERROR_REPORTING", "false")
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    return tmp_path


def _read_transaction_log(run_dir: Path) -> list[dict]:
    """Every record of the offline run's ``run-*.wandb`` log, decoded by wandb's own reader
    (``wandb leet inspect --json``, which ships with the SDK's wandb-core)."""
    (offline,) = sorted((run_dir / "wandb").glob("offline-run-*"))
    (log_file,) = offline.glob("run-*.wandb")
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_ERROR_REPORTING": "false"}
    out = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(log_file)],
                         capture_output=True, text=True, env=env, timeout=60, check=True)
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


@pytest.mark.slow
def test_run_logger_offline_read_back(wandb_env: Path, logs: list[EpisodeLog]) -> None:
    cfg = load_train_config(None, ["run_name=unit", "wandb.group=g1", "wandb.tags=[t1]",
                                   "wandb.transcripts_per_step=3"])
    run_dir = wandb_env / "run"
    ckpt = wandb_env / "checkpoint-2"
    ckpt.mkdir()
    (ckpt / "weights.bin").write_bytes(b"\x00" * 64)
    logged = {0: {"reward/mean": 1.25, "loss": 0.5}, 1: {"reward/mean": 2.5, "loss": 0.25}, 2: episode_metrics(logs)}
    with RunLogger(run_dir, cfg) as sink:
        for step, metrics in logged.items():
            sink.log(step, metrics)
        sink.log_episodes(2, logs, roles=["scientist"] * len(logs))
        sink.log_artifact(ckpt, "checkpoint-unit", type="model", aliases=["step-2"])
        sink.summary({"best_reward": 2.5})
    sink.finish()  # a second finish is a no-op
    with pytest.raises(RuntimeError):
        sink.log(3, {"x": 1.0})

    records = _read_transaction_log(run_dir)
    history = {r["history"]["step"].get("num", 0): r["history"]["item"] for r in records if r["type"] == "history"}
    assert sorted(history) == [0, 1, 2]
    for step, metrics in logged.items():
        for key, value in metrics.items():
            assert history[step][key] == pytest.approx(value), (step, key)
    assert history[2][f"{TRANSCRIPT_TABLE_KEY}._type"] == "table-file"
    assert history[2][f"{TRANSCRIPT_TABLE_KEY}.nrows"] == 3

    (run,) = [r["run"] for r in records if r["type"] == "run"]
    assert run["run_group"] == "g1" and run["tags"] == ["t1"] and run["display_name"] == "unit"
    assert run["config"]["update"]["grpo"]["num_generations"] == cfg.grpo.num_generations
    artifacts = {a["name"]: a for a in (r["artifact"] for r in records if r["type"] == "artifact")}
    model = artifacts["checkpoint-unit"]
    assert model["type"] == "model" and "step-2" in model["aliases"]
    assert [c["path"] for c in model["manifest"]["contents"]] == ["weights.bin"]
    assert any(a["type"] == "run_table" for a in artifacts.values())
    summary = {}
    for r in records:
        if r["type"] == "summary":
            summary.update(r["summary"].get("update", {}))
    assert summary["best_reward"] == 2.5

    (table_file,) = (run_dir / "wandb").glob(f"offline-run-*/files/media/table/{TRANSCRIPT_TABLE_KEY}_*.table.json")
    table = json.loads(table_file.read_text())
    assert table["columns"][:3] == ["step", "episode_id", "role"]
    assert all(isinstance(cell, str) for row in table["data"] for cell in row)
    rewards = sorted(log.total_reward for log in logs)
    assert [float(row[5]) for row in table["data"]] == pytest.approx([rewards[0], rewards[2], rewards[-1]], abs=1e-4)

    # the JSONL copies hold the same values
    lines = [json.loads(x) for x in (run_dir / METRICS_FILE).read_text().splitlines()]
    assert [{k: v for k, v in line.items() if k != "step"} for line in lines] == list(logged.values())
    assert [line["step"] for line in lines] == [0, 1, 2]
    episodes = [json.loads(x) for x in (run_dir / EPISODES_FILE).read_text().splitlines()]
    assert [EpisodeLog.model_validate(e["log"]) for e in episodes] == logs
    assert {e["step"] for e in episodes} == {2} and {e["role"] for e in episodes} == {"scientist"}
    assert json.loads((run_dir / SUMMARY_FILE).read_text()) == {"best_reward": 2.5}
    assert load_train_config(sink.config_path) == cfg


def test_run_logger_disabled_writes_jsonl_only(tmp_path: Path, logs: list[EpisodeLog]) -> None:
    cfg = load_train_config(None, ["wandb.mode=disabled"])
    with RunLogger(tmp_path / "run", cfg) as sink:
        sink.log(0, {"a": 1.0})
        sink.log_episodes(0, logs[:2])
        sink.log_artifact(tmp_path, "noop")
        assert sink.run is None
    assert not (tmp_path / "run" / "wandb").exists()
    assert json.loads((tmp_path / "run" / METRICS_FILE).read_text()) == {"step": 0, "a": 1.0}
    assert len((tmp_path / "run" / EPISODES_FILE).read_text().splitlines()) == 2
    with pytest.raises(ValueError, match="roles"):
        RunLogger(tmp_path / "run2", cfg).log_episodes(0, logs[:2], roles=["scientist"])


def test_stratified_bootstrap_resamples_within_cells():
    """Two cells with constant rewards: a stratified interval has no width (every resample keeps each
    cell's count), the unstratified one mixes the cells and does."""
    from training.eval.stats import bootstrap_ci

    values = [0.0] * 30 + [10.0] * 30
    cells = ["hard"] * 30 + ["easy"] * 30
    assert bootstrap_ci(values, 500, strata=cells) == [5.0, 5.0]
    low, high = bootstrap_ci(values, 500)
    assert low < 4.5 and high > 5.5
    noisy = [float(i % 7) for i in range(60)]
    s_low, s_high = bootstrap_ci(noisy, 500, strata=cells)
    assert s_low < sum(noisy) / 60 < s_high
    with pytest.raises(ValueError, match="strata"):
        bootstrap_ci(values, 100, strata=cells[:3])


@pytest.mark.slow
def test_skill_metrics_see_each_scripted_scientist_use_exactly_its_skills() -> None:
    """Every combination of skills, against both scripted labs: each skill it has is used at every chance
    (where several could act, the chance is the one that goes first), the skills it lacks at none; the naive
    Scientist uses none; and the per-cell rewards average back to the mean."""
    from replicalab.agents import SCIENTIST_FACTORIES, SKILL_SCIENTISTS, SKILLS
    from replicalab.scenarios import cells

    env = ReplicaLabEnv()
    combos = ["naive", *SKILL_SCIENTISTS]
    for lab in ("thrifty", "cooperative"):
        for name in combos:
            logs = [run_episode(env, SCIENTIST_FACTORIES[name](s, t, d), lab, seed=s, template=t, difficulty=d)
                    for s in range(2_000_000, 2_000_012) for t, d in cells()]
            m = episode_metrics(logs)
            has = {"read": "reader" in name, "defend": "defender" in name, "ask": "asker" in name}
            for skill in SKILLS:
                if m[f"skill/{skill}/count"]:
                    assert m[f"skill/{skill}/use_rate"] == (1.0 if has[skill] else 0.0), (lab, name, skill)
            cell_means = [m[f"by_cell/{t}/{d}/reward"] for t, d in cells()]
            assert sum(cell_means) / len(cell_means) == pytest.approx(m["reward/mean"])
    thrifty = episode_metrics([run_episode(env, SCIENTIST_FACTORIES["naive"](s, t, d), "thrifty", seed=s, template=t,
                                           difficulty=d) for s in range(2_000_000, 2_000_012) for t, d in cells()])
    assert all(thrifty[f"skill/{skill}/count"] > 0 for skill in SKILLS)
