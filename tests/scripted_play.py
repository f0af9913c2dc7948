"""Scripted cross-play for the evaluation tests: EpisodeLogs of scripted seats (no model, no Ray), and logs with
one role's reward moved, so a test knows the answer a table should give."""

from __future__ import annotations

from replicalab import DIFFICULTIES, TEMPLATES, VALIDATION_SEEDS, ReplicaLabEnv
from replicalab.episode import run_episode
from replicalab.metrics import role_reward
from replicalab.seats import parse_seat, scripted_agent

CELLS = [(t, d) for t in TEMPLATES for d in DIFFICULTIES]
SEEDS = list(VALIDATION_SEEDS[:3])
LABS = ["scripted:thrifty", "scripted:cooperative"]
#: Bootstrap resamples of the tables under test (intervals are checked for shape, not width).
SAMPLES = 300


def play(scientist: str, lab: str, seeds: list[int] = SEEDS) -> list:
    """The EpisodeLogs of two scripted seats on every (seed, cell) of ``seeds`` x ``CELLS``."""
    sci, lab_name = parse_seat("scientist", scientist).arg, parse_seat("lab_manager", lab).arg
    return [run_episode(ReplicaLabEnv(), scripted_agent("scientist", sci, seed, t, d), lab_name, seed=seed,
                        template=t, difficulty=d) for t, d in CELLS for seed in seeds]


def cross_play(scientists: list[str], labs: list[str] = LABS) -> dict:
    """Every Scientist of ``scientists`` against every Lab Manager of ``labs``: (lab, Scientist) -> EpisodeLogs."""
    return {(lab, sci): play(sci, lab) for lab in labs for sci in scientists}


def shifted(logs: list, role: str, delta: float) -> list:
    """``logs`` with ``role``'s own reward moved by ``delta`` on every episode."""
    out = []
    for log in logs:
        rewards = {**log.role_rewards, role: role_reward(log, role) + delta}
        update = {"role_rewards": rewards, **({"total_reward": rewards[role]} if role == "scientist" else {})}
        out.append(log.model_copy(update=update))
    return out
