"""Advantages beside GRPO's group mean: a running baseline per role (``grpo.advantage: role_baseline``).

GRPO's default advantage is a reward minus the mean of its group (G episodes of one scenario, one role, one
opponent).  With ``role_baseline`` it is the reward minus a running mean of that role's rewards instead --
the role-conditioned advantage estimate of SPIRAL (Liu et al., 2025): each seat's baseline follows its own
reward over the steps, so a seat whose rewards drift (its opponent learns too) keeps a stable baseline, and a
group whose G episodes all score alike still teaches (above the role's usual reward, or below it).

``RoleBaseline`` is a ``TrainerCallback`` with ``ExportableState``: its means are saved in every checkpoint's
``trainer_state.json`` (``stateful_callbacks``) and read back when a resumed run begins, so it computes the same
advantages as an uninterrupted one.  (It restores only itself: the trainer's own control state is not reloaded.)
The arithmetic is ``training.trainer.grpo_maths.role_advantages``.
"""

from __future__ import annotations

from typing import Sequence

from transformers import TrainerCallback
from transformers.trainer_callback import ExportableState

from training.trainer.grpo_maths import role_advantages


class RoleBaseline(TrainerCallback, ExportableState):
    """An exponential moving average of each role's reward, one update per generation batch."""

    def __init__(self, decay: float, means: dict[str, float] | None = None) -> None:
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"decay must be in [0, 1), got {decay}")
        self.decay = decay
        self.means: dict[str, float] = dict(means or {})

    def advantages(self, rewards: Sequence[float], roles: Sequence[str]) -> list[float]:
        """Each reward minus its role's baseline before this batch (a role's first batch: its mean in the
        batch); then each role's baseline moves toward the role's mean in this batch."""
        out, self.means = role_advantages(rewards, roles, self.means, self.decay)
        return out

    def state(self) -> dict:
        return {"args": {"decay": self.decay}, "attributes": {"means": dict(self.means)}}

    def on_train_begin(self, args, state, control, **kwargs):
        """On a resumed run ``state`` is the checkpoint's: take the baselines it saved."""
        stored = (state.stateful_callbacks or {}).get(type(self).__name__)
        if isinstance(stored, list):  # transformers stores several callbacks of one type as a list
            stored = stored[0]
        if stored:
            self.means = {role: float(v) for role, v in stored.get("attributes", {}).get("means", {}).items()}
