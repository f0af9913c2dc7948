"""The committed default model and its fingerprint: the build under artifacts/default-model is the one the
code would build, and resolve_default_model uses it, rebuilds a stale one beside it, or leaves a hand-put model."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
from tiny_recipe import TINY_RECIPE

import replicalab.prompts
from training.config.model import DefaultModelConfig
from training.model.card import BUILD_INFO_FILE
from training.model.default import REPO_ROOT, build_default_model, resolve_default_model
from training.model.model_path import check_files
from training.model.fingerprint import _transcripts, model_fingerprint, recipe_config

COMMITTED = REPO_ROOT / "artifacts" / "default-model"
#: The committed folder stays small enough to live in git (weights, tokenizer, config, card, build record).
MAX_COMMITTED_BYTES = 8 * 2**20


def test_the_committed_default_model_is_the_one_the_code_builds() -> None:
    info = json.loads((COMMITTED / BUILD_INFO_FILE).read_text())
    code = model_fingerprint()
    assert info["fingerprint"] == code, (
        f"artifacts/default-model was built for fingerprint {info['fingerprint'][:12]}, the code's is {code[:12]} "
        "(the game, the prompts, the scripted agents or DefaultModelConfig changed): rebuild it with "
        "`replicalab build-default-model --out artifacts/default-model` and commit it")
    assert recipe_config(DefaultModelConfig.model_validate(info["config"])) == recipe_config(DefaultModelConfig())
    check_files("artifacts/default-model", COMMITTED)
    assert sum(f.stat().st_size for f in COMMITTED.iterdir()) < MAX_COMMITTED_BYTES
    assert "evaluation" in info  # the seat check of the build is recorded with it


def test_the_fingerprint_follows_the_recipe_and_the_prompts(monkeypatch: pytest.MonkeyPatch) -> None:
    base = model_fingerprint(TINY_RECIPE)
    assert model_fingerprint(TINY_RECIPE.model_copy(update={"torch_threads": 1})) == base  # speed only
    recipe = recipe_config(TINY_RECIPE)
    assert "torch_threads" not in recipe and "logging_steps" not in recipe["sft"]
    arch = TINY_RECIPE.architecture.model_copy(update={"copy_self_match": 0.0})
    assert model_fingerprint(TINY_RECIPE.model_copy(update={"architecture": arch})) != base
    # a change to the prompt format changes the transcripts, so the fingerprint
    monkeypatch.setattr(replicalab.prompts, "REPLY_INSTRUCTION", "Reply with one JSON object.")
    _transcripts.cache_clear()
    try:
        assert model_fingerprint(TINY_RECIPE) != base
    finally:
        monkeypatch.undo()
        _transcripts.cache_clear()
    assert model_fingerprint(TINY_RECIPE) == base


def _fake_build(path: Path, fingerprint: str | None) -> Path:
    """A directory that looks like a default-model build for resolve_default_model (it only reads
    config.json's presence and build_info.json)."""
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    if fingerprint is not None:
        (path / BUILD_INFO_FILE).write_text(json.dumps({"fingerprint": fingerprint, "cpu_seconds": 60}))
    return path


def test_a_current_build_and_a_hand_put_model_are_used_as_they_are(tmp_path: Path) -> None:
    current = _fake_build(tmp_path / "current", model_fingerprint(TINY_RECIPE))
    assert resolve_default_model(current, cfg=TINY_RECIPE) == current
    by_hand = _fake_build(tmp_path / "by-hand", None)  # no build_info.json: not ours to replace
    assert resolve_default_model(by_hand, cfg=TINY_RECIPE) == by_hand
    assert sorted(p.name for p in tmp_path.iterdir()) == ["by-hand", "current"]


@pytest.mark.slow  # builds the tiny recipe
def test_a_stale_build_is_moved_aside_and_rebuilt(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    target = build_default_model(tmp_path / "model", TINY_RECIPE, progress=False)
    info = json.loads((target / BUILD_INFO_FILE).read_text())
    info["fingerprint"] = "0" * 64  # built by other code
    (target / BUILD_INFO_FILE).write_text(json.dumps(info))
    (target / "notes.txt").write_text("mine")
    with caplog.at_level(logging.WARNING, logger="training.model.default"):
        assert resolve_default_model(target, cfg=TINY_RECIPE, progress=False) == target
    (line,) = [r.getMessage() for r in caplog.records if "stale" in r.getMessage()]
    assert f"built for fingerprint {'0' * 12}, the code is {model_fingerprint(TINY_RECIPE)[:12]}" in line
    assert "minutes on this machine" in line
    aside = tmp_path / f"model.stale-{'0' * 12}"
    assert (aside / "notes.txt").read_text() == "mine" and (aside / "model.safetensors").is_file()  # kept
    assert json.loads((target / BUILD_INFO_FILE).read_text())["fingerprint"] == model_fingerprint(TINY_RECIPE)
    assert not (target / "notes.txt").exists()
    shutil.rmtree(aside)
