"""Checkpoints and resume: manifests, damaged checkpoints, and logs that hold each step exactly once.

The slow tests train a tiny random-weight model for a few steps (in-process backend): an uninterrupted
4-step run is the reference; copies of it with the newest checkpoint damaged resume from the previous
complete one and must end with the reference's weights and logs.  ``test_faults.py`` interrupts runs.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from resume_runs import (  # noqa: F401 -- reference_run is a fixture
    RESUME_STEPS,
    TRAIN_CFG,
    assert_same_run,
    comparable_rows,
    reference_run,
    resume_overrides,
    weights,
)


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


#: How the newest checkpoint is damaged, and the file the warning must name.
DAMAGE = {
    "optimizer-deleted": (lambda c: (c / "optimizer.pt").unlink(), "optimizer.pt missing"),
    "scheduler-deleted": (lambda c: (c / "scheduler.pt").unlink(), "scheduler.pt missing"),
    "weights-truncated": (lambda c: _truncate(c / "model.safetensors"), "model.safetensors has"),
    "manifest-missing": (lambda c: (c / "manifest.json").unlink(), "no manifest.json"),
}


@pytest.mark.slow
@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damaged_newest_checkpoint_resumes_from_previous(reference_run: Path, policy_wide_model_dir: Path,
                                                        tmp_path: Path, damage: str,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    from training.config.train import load_train_config
    from training.trainer.run import run_train

    run = tmp_path / "ref"
    shutil.copytree(reference_run, run)
    shutil.rmtree(run / "final")
    hurt, named = DAMAGE[damage]
    hurt(run / "checkpoints" / f"checkpoint-{RESUME_STEPS}")
    cfg = load_train_config(TRAIN_CFG, resume_overrides(policy_wide_model_dir, tmp_path, "ref"))
    with caplog.at_level(logging.WARNING, logger="training"):
        summary = run_train(cfg, resume=True)
    assert summary["resumed_from"].endswith(f"checkpoint-{RESUME_STEPS - 1}")
    warning = " ".join(r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)
    assert f"checkpoint-{RESUME_STEPS}" in warning and named in warning, warning
    assert (run / "checkpoints" / f"damaged-checkpoint-{RESUME_STEPS}").is_dir()  # kept aside, not deleted
    assert_same_run(run, reference_run)


def test_manifest_detects_every_kind_of_damage(tmp_path: Path) -> None:
    from training.trainer.checkpoints import verify_checkpoint, write_manifest

    def fresh(name: str) -> Path:
        ckpt = tmp_path / name / "checkpoint-3"
        ckpt.mkdir(parents=True)
        for f in ("optimizer.pt", "scheduler.pt", "trainer_state.json", "rng_state.pth", "model.safetensors"):
            (ckpt / f).write_bytes(f.encode() * 100)
        write_manifest(ckpt, 3, {"metrics.jsonl": 7})
        return ckpt

    assert verify_checkpoint(fresh("intact")) == []
    ckpt = fresh("deleted")
    (ckpt / "rng_state.pth").unlink()
    assert verify_checkpoint(ckpt) == ["rng_state.pth missing"]
    ckpt = fresh("flipped")
    data = bytearray((ckpt / "scheduler.pt").read_bytes())
    data[5] ^= 1
    (ckpt / "scheduler.pt").write_bytes(bytes(data))
    assert verify_checkpoint(ckpt) == ["scheduler.pt content differs from the manifest (sha256)"]
    ckpt = fresh("torn")
    (ckpt / "manifest.json").write_text('{"files": {"optim')
    assert "unreadable" in verify_checkpoint(ckpt)[0]
    ckpt = tmp_path / "never" / "checkpoint-1"
    ckpt.mkdir(parents=True)
    (ckpt / "model.safetensors").write_bytes(b"x")
    write_manifest(ckpt, 1)
    assert "optimizer.pt never written" in verify_checkpoint(ckpt)


def test_no_complete_checkpoint_is_one_clear_error(tmp_path: Path) -> None:
    from training.errors import UserInputError
    from training.trainer.checkpoints import resume_checkpoint, write_manifest

    for step in (1, 2):
        ckpt = tmp_path / f"checkpoint-{step}"
        ckpt.mkdir()
        (ckpt / "optimizer.pt").write_bytes(b"o")
    write_manifest(tmp_path / "checkpoint-1", 1)
    with pytest.raises(UserInputError) as err:
        resume_checkpoint(tmp_path)
    text = str(err.value)
    assert "no complete checkpoint" in text and "checkpoint-2: no manifest.json" in text and "\n" not in text
    assert (tmp_path / "checkpoint-2").is_dir()  # nothing renamed or removed when there is no fallback


def test_run_logger_resume_cuts_logs_and_continues_the_wandb_run(tmp_path: Path, monkeypatch) -> None:
    from training.config.train import TrainConfig
    from training.tracking import WANDB_ID_FILE, RunLogger

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    cfg = TrainConfig(run_name="r", output_dir=str(tmp_path), wandb={"mode": "offline"})
    with RunLogger(tmp_path / "r", cfg) as sink:
        for step in range(4):
            sink.log(step, {"x": float(step)})
            if step == 1:
                positions = sink.log_positions()
    first_id = (tmp_path / "r" / WANDB_ID_FILE).read_text().strip()
    with (tmp_path / "r" / "metrics.jsonl").open("a") as fh:
        fh.write('{"step": 4, "x"')  # a row torn by a crash
    with RunLogger(tmp_path / "r", cfg, resume=positions) as sink:
        assert sink.run.id == first_id
        for step in range(2, 4):
            sink.log(step, {"x": float(step)})
    steps = [json.loads(line)["step"] for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [0, 1, 2, 3]
    runs = sorted(p.name for p in (tmp_path / "r" / "wandb").glob("offline-run-*"))
    assert len(runs) == 2 and all(name.split("-")[3] == first_id for name in runs)  # same run, resumed
