"""The opponent pools of a run (``seats.pools``, ``seats.snapshots``): who plays the other seat of each GRPO
group, the frozen snapshots of the policy, and their place in checkpoints.

Draws are deterministic: group ``g`` of step ``t`` draws with ``random.Random(f"{seed}/{t}/{g}")`` from the
members and snapshots held at ``t``, so a run resumed from a checkpoint (whose snapshots it restores) plays the
same opponents, step for step, as an uninterrupted one.  Snapshots are copies of the weights the step's
rollouts used, taken at steps 0, ``every``, ``2 every``, ...; the newest ``keep`` are held.  Each is saved in
every checkpoint (``SNAPSHOT_DIR``: one safetensors file per snapshot and ``pool.json``) before the manifest
seals it.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
from transformers import TrainerCallback

from replicalab.seats import ROLES, other_role
from training.config.pool import SNAPSHOT, PoolMember, SnapshotConfig
from training.rollout.sync_wire import numpy_payload
from training.rollout.contract import SNAPSHOT_PREFIX
from training.rollout.records import EpisodeJob
from training.trainer.checkpoints import CHECKPOINT_PREFIX

#: The checkpoint's folder of snapshots: ``pool.json`` (the steps held, the non-array payload entries) and
#: ``snapshot-STEP.safetensors``.
SNAPSHOT_DIR = "opponent_snapshots"


class OpponentPool:
    """Draws opponents and holds the policy's snapshots (on the main process: the one with the backend)."""

    def __init__(self, pools: Mapping[str, Sequence[PoolMember]], snapshots: SnapshotConfig, seed: int) -> None:
        self.pools = {role: [(m.seat.strip(), m.weight) for m in members] for role, members in pools.items()}
        self.every, self.keep, self.seed = snapshots.every, snapshots.keep, seed
        self.held: dict[int, dict[str, Any]] = {}  # step -> a frozen copy of the weights

    # -- snapshots ---------------------------------------------------------------------------------
    def take_snapshot(self, step: int, state: Mapping[str, Any]) -> bool:
        """Freeze a copy of ``state`` (the weights step ``step`` plays) when a snapshot is due; True if taken."""
        if not self.every or step % self.every or step in self.held:
            return False
        self.held[step] = numpy_payload(state, copy=True)  # float32 arrays of their own, never the live tensors
        for old in sorted(self.held)[:-self.keep]:
            del self.held[old]
        return True

    def snapshot_states(self) -> dict[str, dict[str, Any]]:
        """The snapshots held, by their seat name (``snapshot:STEP``)."""
        return {f"{SNAPSHOT_PREFIX}{step}": state for step, state in sorted(self.held.items())}

    # -- draws -------------------------------------------------------------------------------------
    def opponent(self, trained_role: str, step: int, group: int) -> str:
        """The seat spec playing the other role in group ``group`` of step ``step`` (``""``: no pool, the seat)."""
        other = other_role(trained_role)
        members = self.pools.get(other)
        if not members:
            return ""
        rng = random.Random(f"{self.seed}/{step}/{group}")
        seat = rng.choices([s for s, _ in members], weights=[w for _, w in members])[0]
        if seat == SNAPSHOT:
            seat = f"{SNAPSHOT_PREFIX}{rng.choice(sorted(self.held))}"
        return seat

    def assign(self, jobs: Sequence[EpisodeJob], step: int) -> list[EpisodeJob]:
        """``jobs`` with each group's drawn opponent."""
        drawn = {job.group: self.opponent(job.role, step, job.group) for job in jobs}
        return [replace(job, opponent=drawn[job.group]) for job in jobs]

    def metrics(self, jobs: Sequence[EpisodeJob]) -> dict[str, float]:
        """The pool's membership this step: the share of each role's groups each member played, the snapshots held."""
        out: dict[str, float] = {"pool/snapshots_held": float(len(self.held))}
        if self.held:
            out["pool/newest_snapshot_step"] = float(max(self.held))
        groups = {job.group: job for job in jobs}
        for trained in ROLES:
            mine = [job for job in groups.values() if job.role == trained and job.opponent]
            other = other_role(trained)
            for seat, count in Counter(_member(job.opponent) for job in mine).items():
                out[f"pool/{other}/{seat}"] = count / len(mine)
        return out

    # -- checkpoints -------------------------------------------------------------------------------
    def save(self, checkpoint: Path) -> None:
        """Write the snapshots held into ``checkpoint/SNAPSHOT_DIR``."""
        from safetensors.numpy import save_file

        folder = checkpoint / SNAPSHOT_DIR
        folder.mkdir(parents=True, exist_ok=True)
        extras = {}
        for step, state in self.held.items():
            save_file({k: np.ascontiguousarray(v) for k, v in state.items() if isinstance(v, np.ndarray)},
                      str(folder / f"snapshot-{step}.safetensors"))
            extras[str(step)] = {k: v for k, v in state.items() if not isinstance(v, np.ndarray)}
        (folder / "pool.json").write_text(json.dumps({"steps": sorted(self.held), "extras": extras}, indent=1),
                                          encoding="utf-8")

    def load(self, checkpoint: Path) -> None:
        """Hold the snapshots saved in ``checkpoint`` (none when it has no ``SNAPSHOT_DIR``)."""
        from safetensors.numpy import load_file

        folder = checkpoint / SNAPSHOT_DIR
        self.held = {}
        if not (folder / "pool.json").is_file():
            return
        saved = json.loads((folder / "pool.json").read_text(encoding="utf-8"))
        for step in saved["steps"]:
            state = dict(load_file(str(folder / f"snapshot-{step}.safetensors")))
            state.update(saved["extras"].get(str(step), {}))
            self.held[int(step)] = state


def _member(seat: str) -> str:
    """The pool member a drawn seat stands for (every ``snapshot:STEP`` is ``snapshot``)."""
    return SNAPSHOT if seat.startswith(SNAPSHOT_PREFIX) else seat


class SavePoolCallback(TrainerCallback):
    """Writes the pool's snapshots into each checkpoint (main process; before the manifest seals it)."""

    def __init__(self, pool: OpponentPool) -> None:
        self.pool = pool

    def on_save(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self.pool.save(Path(args.output_dir) / f"{CHECKPOINT_PREFIX}{state.global_step}")
