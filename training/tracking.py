"""The driver-side run logger (JSONL always, W&B per config).

Aggregates of EpisodeLogs are ``replicalab.metrics.episode_metrics``.  ``RunLogger`` is the one sink a training or evaluation driver writes to: ``metrics.jsonl``, ``episodes.jsonl`` and
``summary.json`` in the run directory, and, unless ``cfg.wandb.mode == "disabled"``, a W&B run whose
files live in ``<run_dir>/wandb/``.  Workers never log; they return records to the driver.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from types import TracebackType
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

from pydantic import BaseModel

from replicalab.metrics import role_reward
from replicalab.models import EpisodeLog
from replicalab.transcript import format_episode
from training.config.loading import save_resolved

METRICS_FILE = "metrics.jsonl"
EPISODES_FILE = "episodes.jsonl"
SUMMARY_FILE = "summary.json"
#: File in the run directory holding the W&B run id, so a resumed run continues the same W&B run.
WANDB_ID_FILE = "wandb_run_id"
#: Where W&B keeps the run's files (``wandb.init(dir=run_dir)`` makes it).
WANDB_DIRNAME = "wandb"
#: W&B key of the per-step transcript table.
TRANSCRIPT_TABLE_KEY = "transcripts"
logger = logging.getLogger(__name__)
TRANSCRIPT_COLUMNS = ["step", "episode_id", "role", "template", "difficulty", "reward", "verdict", "transcript"]


def transcript_text(log: EpisodeLog) -> str:
    """Readable transcript of ``log`` (the judge breakdown included when the log has one)."""
    if log.final_state is not None and log.reward_breakdown is not None:
        return format_episode(log)
    return "\n".join(f"[round {e.round_number + 1}] {e.role}: {e.message}" for e in log.transcript)


def _spread(n: int, k: int) -> list[int]:
    """``k`` indices spread evenly over ``range(n)`` (first and last included), no repeats."""
    if k <= 0 or n == 0:
        return []
    if k >= n:
        return list(range(n))
    if k == 1:
        return [0]
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})


def _append_jsonl(path: Path, rows: Iterable[Mapping[str, Any]]) -> int:
    """Append ``rows``; return how many lines were written."""
    n = 0
    with path.open("a", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")
            n += 1
    return n


def _count_lines(path: Path) -> int:
    if not path.exists():
        return 0
    with path.open("rb") as fh:
        return sum(1 for _ in fh)


def truncate_jsonl(path: Path, keep: int) -> int:
    """Keep the first ``keep`` complete lines of ``path`` (a half-written last line goes too), rewritten
    atomically; return how many lines were dropped."""
    if not path.exists():
        return 0
    lines = path.read_bytes().splitlines(keepends=True)
    kept = [line for line in lines[:keep] if line.endswith(b"\n")]
    if len(kept) == len(lines):
        return 0
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(b"".join(kept))
    os.replace(tmp, path)
    return len(lines) - len(kept)


class RunLogger:
    """Driver-side sink for one run.  Steps passed to ``log``/``log_episodes`` must not decrease.

    Saves the resolved config (``config.yaml``) at once, then writes ``metrics.jsonl`` (``{"step",
    **metrics}`` per ``log``), ``episodes.jsonl`` (``{"step", "role", "log": EpisodeLog JSON}`` per
    episode) and ``summary.json`` under ``run_dir``, and mirrors everything to a W&B run
    (``cfg.wandb``; offline by default, ``dir=run_dir``, the resolved config as ``config``).  wandb is
    imported only when the mode is not ``disabled``.  ``finish`` is idempotent; the logger is a
    context manager.  Any config with ``run_name`` and a ``wandb`` section works as ``cfg``.

    ``resume`` (lines per log file, as ``log_positions()`` returned when a checkpoint was saved) continues
    an earlier run: ``metrics.jsonl`` and ``episodes.jsonl`` are cut back to those lines (rows written
    after the checkpoint are dropped, so each step appears once) and the W&B run whose id is stored in
    ``wandb_run_id`` is resumed (``resume="allow"``) rather than forked.

    ``observe(step, metrics)``, when given, is called after each ``log`` has reached ``metrics.jsonl`` (a sweep
    trial reports its score to Ray Tune from it).
    """

    def __init__(self, run_dir: str | Path, cfg: BaseModel, *, resume: Optional[Mapping[str, int]] = None,
                 observe: Optional[Callable[[int, Mapping[str, float]], None]] = None) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.cfg = cfg
        self.metrics_path = self.run_dir / METRICS_FILE
        self.episodes_path = self.run_dir / EPISODES_FILE
        self.summary_path = self.run_dir / SUMMARY_FILE
        self.config_path = save_resolved(cfg, self.run_dir)
        self._summary: dict[str, Any] = {}
        self._observe = observe
        self._finished = False
        self._wandb: Any = None
        self.run: Any = None  # the wandb Run, or None when disabled / finished
        if resume is not None:
            for path in (self.metrics_path, self.episodes_path):
                dropped = truncate_jsonl(path, int(resume.get(path.name, 0)))
                if dropped:
                    logger.info("resume: dropped %d rows of %s written after the checkpoint", dropped, path.name)
        self._lines = {p.name: _count_lines(p) for p in (self.metrics_path, self.episodes_path)}
        if cfg.wandb.mode != "disabled":
            import wandb

            self._wandb = wandb
            w = cfg.wandb
            id_file = self.run_dir / WANDB_ID_FILE
            run_id = id_file.read_text().strip() if resume is not None and id_file.exists() else None
            if run_id is None:
                from wandb.sdk.lib.runid import generate_id

                run_id = generate_id()
                id_file.write_text(run_id + "\n")
            self.run = wandb.init(
                mode=w.mode, project=w.project, entity=w.entity, group=w.group, tags=list(w.tags) or None,
                name=cfg.run_name, dir=str(self.run_dir), config=cfg.model_dump(mode="json"),
                id=run_id, resume="allow" if resume is not None else None,
                reinit="create_new",  # each RunLogger owns its run; never hands back an older one
                settings=wandb.Settings(console="off", x_disable_stats=True),
            )

    def log_positions(self) -> dict[str, int]:
        """Lines written so far to each JSONL log (stored in a checkpoint's manifest for ``resume``)."""
        return dict(self._lines)

    def _check_open(self) -> None:
        if self._finished:
            raise RuntimeError("RunLogger.finish() was already called")

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        """Record scalar ``metrics`` at ``step`` (JSONL line + W&B history)."""
        self._check_open()
        self._lines[self.metrics_path.name] += _append_jsonl(self.metrics_path, [{"step": step, **metrics}])
        if self.run is not None:
            self.run.log(dict(metrics), step=step)
        if self._observe is not None:
            self._observe(step, metrics)

    def log_episodes(self, step: int, logs: Sequence[EpisodeLog], roles: Optional[Sequence[str]] = None) -> None:
        """Append every log to ``episodes.jsonl``; log a W&B table of up to ``transcripts_per_step``
        transcripts spread from the lowest to the highest reward (of the role each was played for).
        ``roles`` (optional, one per log) names the seat each episode was played for.  Every table cell is a string."""
        self._check_open()
        if roles is not None and len(roles) != len(logs):
            raise ValueError(f"got {len(roles)} roles for {len(logs)} logs")
        role_of = list(roles) if roles is not None else [""] * len(logs)
        self._lines[self.episodes_path.name] += _append_jsonl(self.episodes_path, (
            {"step": step, "role": role, "log": log.model_dump(mode="json")} for log, role in zip(logs, role_of)))
        if self.run is None:
            return
        reward = [role_reward(log, role or "scientist") for log, role in zip(logs, role_of)]
        order = sorted(range(len(logs)), key=lambda i: reward[i])
        picked = [order[i] for i in _spread(len(order), self.cfg.wandb.transcripts_per_step)]
        if not picked:
            return
        rows = [[str(step), logs[i].episode_id, role_of[i], logs[i].scenario_template, logs[i].difficulty,
                 f"{reward[i]:.4f}", logs[i].verdict, transcript_text(logs[i])] for i in picked]
        table = self._wandb.Table(columns=TRANSCRIPT_COLUMNS, data=rows)
        self.run.log({TRANSCRIPT_TABLE_KEY: table}, step=step)

    def log_artifact(self, path: str | Path, name: str, type: str = "model",
                     aliases: Optional[Sequence[str]] = None) -> None:
        """Log a file or directory (a checkpoint) as a W&B artifact; a no-op when W&B is disabled.
        ``name`` may hold letters, digits, ``-``, ``_`` and ``.``."""
        self._check_open()
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"artifact path {path} does not exist")
        if self.run is None:
            return
        artifact = self._wandb.Artifact(name, type=type)
        if path.is_dir():
            artifact.add_dir(str(path))
        else:
            artifact.add_file(str(path))
        self.run.log_artifact(artifact, aliases=list(aliases) if aliases else None)

    def summary(self, values: Mapping[str, Any]) -> None:
        """Merge ``values`` into the run summary (``summary.json`` and the W&B summary)."""
        self._check_open()
        self._summary.update(values)
        self.summary_path.write_text(json.dumps(self._summary, indent=2, sort_keys=True), encoding="utf-8")
        if self.run is not None:
            self.run.summary.update(dict(values))

    def finish(self, exit_code: int = 0) -> None:
        """Close the W&B run (safe to call more than once)."""
        if self._finished:
            return
        self._finished = True
        run, self.run = self.run, None
        if run is not None:
            run.finish(exit_code=exit_code)

    def __enter__(self) -> "RunLogger":
        return self

    def __exit__(self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self.finish(exit_code=0 if exc_type is None else 1)


class NullRunLogger:
    """The run logger of a learner process other than the main one: it accepts what ``RunLogger``
    accepts and writes nothing (the main process logs the run once)."""

    def log_positions(self) -> dict[str, int]:
        return {}

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        pass

    def log_episodes(self, step: int, logs: Sequence[EpisodeLog], roles: Optional[Sequence[str]] = None) -> None:
        pass

    def log_artifact(self, path: str | Path, name: str, type: str = "model",
                     aliases: Optional[Sequence[str]] = None) -> None:
        pass

    def summary(self, values: Mapping[str, Any]) -> None:
        pass

    def finish(self, exit_code: int = 0) -> None:
        pass

    def __enter__(self) -> "NullRunLogger":
        return self

    def __exit__(self, *exc: Any) -> None:
        pass
