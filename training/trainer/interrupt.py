"""Graceful stop of a training run on SIGINT (Ctrl-C), SIGTERM (a scheduler's preemption) or SIGUSR1 (SLURM's
warning before the time limit): the signals ``learner.stop_signals`` lists.

``StopOnSignal`` installs the handlers for the run: the first signal only records itself, and
``StopCallback`` then asks the Trainer to save a checkpoint at the next step boundary and stop;
``run_train`` raises ``TrainingInterrupted`` (with the exact ``--resume`` command), which the command
line prints as one line and exits ``128 + signal`` (130 for SIGINT, 143 for SIGTERM).  A second signal
raises ``KeyboardInterrupt`` at once (no checkpoint; the newest complete one stays valid), unless it
comes within ``REPEAT_WINDOW_S`` of the first: that is one stop delivered twice (under torchrun a
Ctrl-C reaches every process from the terminal and again as the launcher's SIGTERM).  Under torchrun
every learner process stops at the same step (``StopCallback`` agrees on it); the launcher kills its
processes ``--shutdown-timeout`` seconds after forwarding the signal (30 by default; ``launch/slurm.sbatch``
sets it from ``STOP_GRACE_S`` and asks torchrun to forward SIGUSR1 too), so a step that cannot finish and
save by then ends without a checkpoint and ``--resume`` continues from the previous complete one.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from types import FrameType
from typing import Any, Optional, Sequence

from transformers import TrainerCallback

from training.trainer.distributed import max_over_processes

logger = logging.getLogger(__name__)

#: The signals that stop a run gracefully when the caller names none.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: Seconds after the first stop signal in which another one is the same stop, not an abort.
REPEAT_WINDOW_S = 2.0


class TrainingInterrupted(Exception):
    """The run stopped on a signal after saving ``checkpoint`` (None: stopped before the first step)."""

    def __init__(self, signum: int, step: int, checkpoint: Optional[str], command: str) -> None:
        self.signum, self.step, self.checkpoint, self.command = signum, step, checkpoint, command
        name = signal.Signals(signum).name
        if checkpoint:
            text = (f"interrupted by {name}: checkpoint saved at step {step} ({checkpoint}); "
                    f"continue with: {command}")
        else:
            text = f"interrupted by {name} before the first training step; nothing saved, run the same command again"
        super().__init__(text)

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class StopOnSignal:
    """Context manager: while active, each of ``signals`` (default SIGINT, SIGTERM) sets ``signum`` (first) or
    raises ``KeyboardInterrupt`` (second).  Handlers are installed only in the main thread (elsewhere it is
    inert)."""

    def __init__(self, signals: Sequence[int] = STOP_SIGNALS) -> None:
        self.signals = tuple(signals)
        self.signum: Optional[int] = None
        self._received_at: Optional[float] = None  # when this process got its first signal
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: Optional[FrameType]) -> None:
        now = time.monotonic()
        if self._received_at is not None:
            if now - self._received_at < REPEAT_WINDOW_S:
                return
            raise KeyboardInterrupt(f"second {signal.Signals(signum).name}: aborting without a checkpoint")
        self._received_at = now
        if self.signum is not None:  # the stop another learner process received is under way already
            return
        self.signum = signum
        logger.warning("%s received: saving a checkpoint at the end of this step, then stopping "
                       "(send it again to abort at once)", signal.Signals(signum).name)

    def __enter__(self) -> "StopOnSignal":
        if threading.current_thread() is threading.main_thread():
            for sig in self.signals:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}


class StopCallback(TrainerCallback):
    """At a step boundary after a stop signal: save a checkpoint and end training."""

    def __init__(self, stop: StopOnSignal) -> None:
        self.stop = stop

    def on_step_end(self, args, state, control, **kwargs):
        # every learner process stops at the same step, whichever of them the signal reached
        signum = max_over_processes(self.stop.signum or 0)
        if signum and self.stop.signum is None:
            self.stop.signum = signum
        if self.stop.signum is not None:
            control.should_save = True
            control.should_training_stop = True
        return control
