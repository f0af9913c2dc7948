"""The pairings an evaluation has finished, kept on disk, so an interrupted ``replicalab eval`` resumes.

``OUT/pairings/`` holds one JSON-lines file per finished (Lab Manager, agent) pairing: a first line naming the
pairing and what decides its episodes (``play_key``), then its EpisodeLogs in job order.  A file is written under
a temporary name and renamed, so a pairing is kept whole or not at all.  A later evaluation into the same ``out``
plays only the pairings it lacks, and one with more agents or Lab Managers plays only the new pairings.  A kept
pairing that the evaluation would play again under other settings (seeds, decoding, a model's weights) is left
as it is, and the evaluation stops before playing anything with one line: give a new ``out``.  The code that
played a pairing is not in its key: after changing the game, its prompts or the decoding code, give a new ``out``.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from replicalab.models import EpisodeLog
from training.config.eval import EvalConfig
from training.errors import UserInputError
from training.eval.league import VS

KEPT_DIR = "pairings"
#: Files whose size and modification time stand for a model's weights in ``play_key``.
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt")


def weights_stamp(directory: str) -> list[list[Any]]:
    """``[name, size, mtime_ns]`` of each weight file of a model directory, by name: a model retrained or
    replaced in place gets another stamp."""
    found = sorted(p for p in Path(directory).iterdir() if p.suffix in WEIGHT_SUFFIXES and p.is_file())
    return [[p.name, p.stat().st_size, p.stat().st_mtime_ns] for p in found]


def play_key(cfg: EvalConfig, model_dirs: Mapping[str, str]) -> dict[str, Any]:
    """What decides a pairing's episodes besides its two seats: the split's seeds and cells, the decoding and its
    seed, the rounds, the chat template, the engine, and the weights of each ``model:`` seat (``model_dirs``:
    seat spec -> local directory).  Where the episodes play (``backend``, ``num_workers``) does not change them."""
    return {"split": cfg.split, "seeds": cfg.seeds, "cells": [list(c) for c in cfg.cells],
            "sampling": cfg.sampling.model_dump(mode="json"), "sampling_seed": cfg.sampling_seed,
            "max_rounds": cfg.max_rounds, "chat_template": cfg.chat_template, "engine": cfg.engine,
            "weights": {spec: weights_stamp(path) for spec, path in sorted(model_dirs.items())}}


def _seat_key(key: Mapping[str, Any], lab: str, spec: str) -> dict[str, Any]:
    """``key`` with only the weights of this pairing's two seats (other seats may come and go)."""
    return {**key, "weights": {s: w for s, w in key["weights"].items() if s in (lab, spec)}}


class KeptPairings:
    """The finished pairings under ``out/pairings`` for one evaluation's ``play_key``."""

    def __init__(self, out: Path, key: Mapping[str, Any]) -> None:
        self.root = Path(out) / KEPT_DIR
        self.key = dict(key)

    def path(self, lab: str, spec: str) -> Path:
        name = hashlib.sha256(json.dumps([lab, spec]).encode()).hexdigest()[:16]
        return self.root / f"{name}.jsonl"

    def _header(self, lab: str, spec: str) -> Optional[dict[str, Any]]:
        path = self.path(lab, spec)
        if not path.is_file():
            return None
        with path.open(encoding="utf-8") as fh:
            try:
                return json.loads(fh.readline())
            except json.JSONDecodeError:
                raise UserInputError(f"{path} (a kept pairing) does not read back; move it away or give a new "
                                     "out") from None

    def check(self, pairings: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
        """The pairings of ``pairings`` already kept under this key; one line if any was played otherwise."""
        kept = []
        for lab, spec in pairings:
            header = self._header(lab, spec)
            if header is None:
                continue
            expected, found = _seat_key(self.key, lab, spec), header.get("key", {})
            if found != expected:
                changed = sorted(k for k, v in expected.items() if found.get(k) != v)
                raise UserInputError(
                    f"{self.root} holds the pairing {spec}{VS}{lab} played with other "
                    f"{', '.join(changed) or 'settings'}; give a new out, or move that folder away to play it again")
            kept.append((lab, spec))
        return kept

    def load(self, lab: str, spec: str) -> list[EpisodeLog]:
        """The EpisodeLogs of a kept pairing (``check`` first)."""
        with self.path(lab, spec).open(encoding="utf-8") as fh:
            fh.readline()
            try:
                return [EpisodeLog.model_validate_json(line) for line in fh if line.strip()]
            except ValueError as exc:
                raise UserInputError(f"{self.path(lab, spec)} (a kept pairing) does not read back "
                                     f"({type(exc).__name__}); move it away or give a new out") from None

    def keep(self, lab: str, spec: str, logs: Sequence[EpisodeLog]) -> None:
        """Write a finished pairing whole: to a temporary file, then renamed into place."""
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.path(lab, spec)
        tmp = path.with_suffix(".tmp")
        with tmp.open("w", encoding="utf-8") as fh:
            fh.write(json.dumps({"lab_manager": lab, "agent": spec, "key": _seat_key(self.key, lab, spec)}) + "\n")
            for log in logs:
                fh.write(log.model_dump_json() + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
