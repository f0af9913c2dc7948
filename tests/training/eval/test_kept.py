"""An evaluation keeps each pairing as it finishes and, run again into the same out, plays only what it lacks."""

from __future__ import annotations

import json
import os

import pytest

from training.config.eval import load_eval_config
from training.errors import UserInputError
from training.eval import run as eval_run
from training.eval.kept import KEPT_DIR, KeptPairings, play_key

SCIENTISTS = ["scripted:naive", "scripted:reader"]
LABS = ["scripted:thrifty", "scripted:cooperative"]


def config(out, agents=SCIENTISTS, labs=LABS, *extra: str):
    return load_eval_config(None, [f"agents={json.dumps(agents)}", f"lab_managers={json.dumps(labs)}",
                                   "split=validation", "episodes=2", "templates=[cell_biology]",
                                   "bootstrap_samples=200", "wandb.mode=disabled", f"out={out}", *extra])


@pytest.fixture
def plays(monkeypatch):
    """Every pairing ``run_eval`` plays (not loads), in order; ``stop_after`` interrupts the next one."""
    played, real = [], eval_run.play_agent
    state = {"stop_after": None}

    def play(spec, lab, cfg, jobs):
        if state["stop_after"] is not None and len(played) >= state["stop_after"]:
            raise KeyboardInterrupt
        played.append((lab, spec))
        return real(spec, lab, cfg, jobs)

    monkeypatch.setattr(eval_run, "play_agent", play)
    return played, state


def test_an_interrupted_evaluation_resumes_with_the_report_of_an_uninterrupted_one(tmp_path, plays):
    played, state = plays
    whole = eval_run.run_eval(config(tmp_path / "whole"), progress=False)
    n = len(played)  # every agent against both labs, and the oracle against the first
    assert n == len(SCIENTISTS) * len(LABS) + 1
    played.clear()
    state["stop_after"] = 2
    with pytest.raises(KeyboardInterrupt):
        eval_run.run_eval(config(tmp_path / "cut"), progress=False)
    assert len(list((tmp_path / "cut" / KEPT_DIR).glob("*.jsonl"))) == 2
    assert not (tmp_path / "cut" / "report.json").exists()
    first = list(played)
    played.clear()
    state["stop_after"] = None
    resumed = eval_run.run_eval(config(tmp_path / "cut"), progress=False)
    assert len(played) == n - 2 and not set(played) & set(first)
    assert resumed["cross_play"] == whole["cross_play"] and resumed["agents"] == whole["agents"]
    played.clear()
    again = eval_run.run_eval(config(tmp_path / "cut"), progress=False)  # everything kept: nothing plays
    assert played == [] and again["cross_play"] == whole["cross_play"]
    for name in ("episodes.jsonl", "metrics.jsonl"):  # each run's logs are its own, never appended twice
        assert (tmp_path / "cut" / name).read_text() == (tmp_path / "whole" / name).read_text()


def test_a_wider_evaluation_plays_only_its_new_pairings(tmp_path, plays):
    played, _ = plays
    eval_run.run_eval(config(tmp_path, SCIENTISTS[:1]), progress=False)
    played.clear()
    report = eval_run.run_eval(config(tmp_path, [*SCIENTISTS, "scripted:defender"]), progress=False)
    assert sorted(played) == sorted((lab, s) for lab in LABS for s in SCIENTISTS[1:] + ["scripted:defender"])
    assert set(report["cross_play"][LABS[1]]) == {*SCIENTISTS, "scripted:defender"}


def test_a_pairing_kept_under_other_settings_stops_the_run_and_stays(tmp_path, plays):
    played, _ = plays
    eval_run.run_eval(config(tmp_path), progress=False)
    files = {p: p.read_bytes() for p in (tmp_path / KEPT_DIR).iterdir()}
    played.clear()
    for extra, named in (("seed_offset=3", "seeds"), ("max_rounds=4", "max_rounds"),
                         ("sampling.do_sample=true", "sampling")):
        with pytest.raises(UserInputError, match=f"played with other {named}; give a new out") as err:
            eval_run.run_eval(config(tmp_path, SCIENTISTS, LABS, extra), progress=False)
        assert "\n" not in str(err.value)
    assert played == [] and {p: p.read_bytes() for p in (tmp_path / KEPT_DIR).iterdir()} == files


def test_a_model_retrained_in_place_is_not_taken_for_its_kept_pairing(tmp_path):
    weights = tmp_path / "model" / "model.safetensors"
    weights.parent.mkdir()
    weights.write_bytes(b"weights")
    (weights.parent / "config.json").write_text("{}")
    cfg = config(tmp_path / "out", ["model:" + str(weights.parent)], LABS[:1])
    seats = {"model:" + str(weights.parent): str(weights.parent)}
    kept = KeptPairings(tmp_path / "out", play_key(cfg, seats))
    pairing = (LABS[0], "model:" + str(weights.parent))
    kept.keep(*pairing, [])
    assert kept.check([pairing]) == [pairing] and kept.load(*pairing) == []
    os.utime(weights, ns=(1, 1))
    with pytest.raises(UserInputError, match="played with other weights"):
        KeptPairings(tmp_path / "out", play_key(cfg, seats)).check([pairing])
    other = KeptPairings(tmp_path / "out", play_key(cfg, {}))
    assert other.check([(LABS[1], "scripted:naive")]) == []  # a pairing never kept plays


def test_a_torn_or_damaged_pairing_is_played_again_or_named(tmp_path):
    kept = KeptPairings(tmp_path, play_key(config(tmp_path), {}))
    pairing = (LABS[0], SCIENTISTS[0])
    kept.root.mkdir()
    kept.path(*pairing).with_suffix(".tmp").write_text('{"half": ')  # a write cut short is never renamed in
    assert kept.check([pairing]) == []
    kept.path(*pairing).write_text("not json\n")
    with pytest.raises(UserInputError, match="does not read back"):
        kept.check([pairing])
    kept.keep(*pairing, [])
    with kept.path(*pairing).open("a") as fh:
        fh.write('{"seed": "x"}\n')
    with pytest.raises(UserInputError, match="does not read back"):
        kept.load(*pairing)


def test_an_out_that_holds_only_kept_pairings_is_an_evaluation_to_resume(tmp_path):
    from training.cli import _check_eval_inputs

    (tmp_path / KEPT_DIR).mkdir()
    _check_eval_inputs(config(tmp_path))
    (tmp_path / KEPT_DIR).rmdir()
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(UserInputError, match="holds no earlier evaluation"):
        _check_eval_inputs(config(tmp_path))
