"""Checkpoints of a training run: ``<run_dir>/checkpoints/checkpoint-N``, found by step number, each
sealed by a manifest.

After the Trainer has written ``checkpoint-N`` (weights, optimizer, scheduler, RNG states, trainer
state), ``ManifestCallback`` writes ``manifest.json`` into it LAST and atomically (temporary file +
``os.replace``): every file with its size and sha256, the step, and how many lines each run log held
at that moment (so a resume can cut the logs back to exactly this step).  A checkpoint without a
valid manifest, or whose files differ from it, or that lacks a part its layout needs (the manifest records the
layout the learner's backend writes: plain, FSDP full or sharded, DeepSpeed; ``checkpoint_layouts``), is
incomplete.  ``resume_checkpoint`` picks the newest
complete checkpoint: damaged newer ones are reported file by file, renamed aside
(``damaged-checkpoint-N``, never deleted) and the previous complete one is used with a warning; none
complete raises ``UserInputError``.  A resume never continues with a silently fresh optimizer.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from training.errors import UserInputError
from training.trainer.checkpoint_layouts import DEFAULT_LAYOUT, missing_parts

logger = logging.getLogger(__name__)

CHECKPOINT_PREFIX = "checkpoint-"
MANIFEST_FILE = "manifest.json"
#: Prefix a damaged checkpoint is renamed to (outside the Trainer's ``checkpoint-*`` pattern).
DAMAGED_PREFIX = "damaged-"
HASH_CHUNK = 1 << 20


def checkpoint_step(path: Path) -> int:
    return int(path.name[len(CHECKPOINT_PREFIX):])


def checkpoints(checkpoints_dir: Path) -> list[Path]:
    """Every ``checkpoint-N`` directory under ``checkpoints_dir``, oldest (lowest N) first."""
    found = [p for p in Path(checkpoints_dir).glob(CHECKPOINT_PREFIX + "*")
             if p.is_dir() and p.name[len(CHECKPOINT_PREFIX):].isdigit()]
    return sorted(found, key=checkpoint_step)


def latest_checkpoint(checkpoints_dir: Path) -> Path | None:
    """The ``checkpoint-N`` with the highest N under ``checkpoints_dir`` (complete or not), or None."""
    found = checkpoints(checkpoints_dir)
    return found[-1] if found else None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(HASH_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _files(ckpt: Path) -> list[Path]:
    return sorted(p for p in ckpt.rglob("*") if p.is_file() and p.name != MANIFEST_FILE
                  and not p.name.startswith(MANIFEST_FILE))


def write_manifest(ckpt: Path, step: int, logs: Optional[Mapping[str, int]] = None, processes: int = 1,
                   layout: str = DEFAULT_LAYOUT) -> Path:
    """Seal ``ckpt``: write ``manifest.json`` (every file's size and sha256, ``step``, ``logs``: lines per
    run log, ``processes``: learner processes that saved into it, ``layout``: how the backend laid it out)
    through a temporary file renamed into place, so the manifest exists only when whole."""
    files = {p.relative_to(ckpt).as_posix(): {"size": p.stat().st_size, "sha256": _sha256(p)} for p in _files(ckpt)}
    manifest = {"step": step, "files": files, "logs": dict(logs or {}), "processes": processes, "layout": layout}
    out = ckpt / MANIFEST_FILE
    tmp = ckpt / f"{MANIFEST_FILE}.tmp"
    with tmp.open("w", encoding="utf-8") as fh:
        json.dump(manifest, fh, indent=1, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, out)
    return out


def read_manifest(ckpt: Path) -> dict[str, Any]:
    """The manifest of ``ckpt``; ``ValueError`` if it is missing or unreadable."""
    path = ckpt / MANIFEST_FILE
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"no {MANIFEST_FILE} (the save did not finish)") from None
    except (OSError, ValueError) as exc:
        raise ValueError(f"{MANIFEST_FILE} unreadable ({exc})") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        raise ValueError(f"{MANIFEST_FILE} malformed")
    return manifest


def verify_checkpoint(ckpt: Path) -> list[str]:
    """What is wrong with ``ckpt``, one entry per file (empty: complete and intact)."""
    try:
        manifest = read_manifest(ckpt)
    except ValueError as exc:
        return [str(exc)]
    listed = manifest["files"]
    problems = missing_parts(ckpt, str(manifest.get("layout", DEFAULT_LAYOUT)), listed,
                             int(manifest.get("processes", 1)))
    for name, want in sorted(listed.items()):
        path = ckpt / name
        if not path.is_file():
            problems.append(f"{name} missing")
        elif path.stat().st_size != want.get("size"):
            problems.append(f"{name} has {path.stat().st_size} bytes, manifest says {want.get('size')}")
        elif _sha256(path) != want.get("sha256"):
            problems.append(f"{name} content differs from the manifest (sha256)")
    return problems


def resume_checkpoint(checkpoints_dir: Path) -> tuple[Path, dict[str, Any]]:
    """The newest complete checkpoint and its manifest.  Damaged newer checkpoints are logged (which
    files), renamed ``damaged-checkpoint-N`` and skipped; none complete raises ``UserInputError``."""
    found = checkpoints(checkpoints_dir)
    if not found:
        raise UserInputError(f"--resume: no checkpoint under {checkpoints_dir}; start without --resume "
                             "(or give the run_name/output_dir of the run to continue)")
    damaged: list[tuple[Path, list[str]]] = []
    for ckpt in reversed(found):
        problems = verify_checkpoint(ckpt)
        if not problems:
            for bad, why in damaged:
                aside = bad.with_name(DAMAGED_PREFIX + bad.name)
                logger.warning("checkpoint %s is incomplete or damaged (%s); resuming from the previous complete "
                               "one, %s; the damaged one is kept as %s", bad.name, "; ".join(why), ckpt.name,
                               aside.name)
                if aside.exists():
                    aside = aside.with_name(f"{aside.name}-{os.getpid()}")
                bad.rename(aside)
            return ckpt, read_manifest(ckpt)
        damaged.append((ckpt, problems))
    detail = "; ".join(f"{p.name}: {', '.join(why)}" for p, why in damaged)
    raise UserInputError(f"--resume: no complete checkpoint under {checkpoints_dir} ({detail}); "
                         "start a new run (another run_name) instead")


def make_manifest_callback(log_positions: Callable[[], Mapping[str, int]], layout: str = DEFAULT_LAYOUT):
    """A ``TrainerCallback`` that seals each checkpoint the Trainer saved (``write_manifest``) with the
    run logs' line counts from ``log_positions()`` and the trainer's ``layout`` (``checkpoint_layouts.layout_of``).
    Add it to the trainer's callbacks."""
    from transformers import TrainerCallback

    from training.trainer.distributed import barrier

    class ManifestCallback(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            barrier()  # every learner process has written its part (its RNG state) before the seal
            if not state.is_world_process_zero:
                return
            ckpt = Path(args.output_dir) / f"{CHECKPOINT_PREFIX}{state.global_step}"
            if ckpt.is_dir():
                write_manifest(ckpt, state.global_step, log_positions(), processes=args.world_size, layout=layout)
                logger.info("checkpoint %s saved and sealed", ckpt)

    return ManifestCallback()
