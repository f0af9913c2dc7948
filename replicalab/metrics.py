"""``episode_metrics``: aggregate metrics of any list of EpisodeLogs (pure: no wandb, no torch).

Training logs them per rollout step, the periodic validation check and ``replicalab eval`` per agent.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Iterable, Sequence

from replicalab.judge.constants import CORE_SCALE
from replicalab.models import EpisodeLog, RewardBreakdown
from replicalab.skill_use import skill_use

#: Breakdown fields averaged as ``reward/<name>``.
COMPONENTS = ("rigor", "feasibility", "fidelity", "efficiency_bonus", "communication_bonus")


_EMPTY = RewardBreakdown()


def role_reward(log: EpisodeLog, role: str) -> float:
    """``role``'s own reward in ``log`` (``role_rewards``; a log without them, written before the Lab
    Manager had a reward of its own, gives the Scientist's ``total_reward`` to both)."""
    return log.role_rewards.get(role, log.total_reward)


def _mean(values: Iterable[float]) -> float:
    values = list(values)
    return float(sum(values) / len(values)) if values else 0.0


def episode_metrics(logs: Sequence[EpisodeLog]) -> dict[str, float]:
    """Aggregate metrics of a batch of episodes; ``{}`` for an empty batch.

    - ``reward/mean``, ``reward/std`` (population) of ``total_reward`` (the Scientist's reward);
      ``reward/lab_manager`` the mean of the Lab Manager's own reward; ``reward/<component>`` means of
      the judge breakdown (a log without one counts as zeros), ``reward/core`` = mean of
      ``CORE_SCALE * rigor * feasibility * fidelity`` and ``penalty/<name>`` (0 where absent).
    - ``episode/agreement_rate``, ``episode/timeout_rate`` (``truncated``), ``episode/rounds`` (mean
      ``rounds_used``), ``episode/count``.
    - ``episode/invalid_action_rate``: turns with an error (unparseable output or an action the env
      rejected) / all turns; ``episode/parse_failure_rate``: turns with no action / all turns; the same
      two per role as ``by_role/<role>/...``.
    - ``by_difficulty/<d>/reward``, ``by_difficulty/<d>/agreement_rate``, ``by_difficulty/<d>/count``.
    - ``skill/<skill>/use_rate``: the share of the chances of each Scientist skill at which the Scientist used
      it, and ``skill/<skill>/count`` the chances (``replicalab.skill_use``; rate 0 where none showed).
    - ``by_cell/<template>/<difficulty>/reward`` and ``.../count``: the Scientist's reward per cell.
    """
    if not logs:
        return {}
    breakdowns = [log.reward_breakdown or _EMPTY for log in logs]
    rewards = [log.total_reward for log in logs]
    out: dict[str, float] = {
        "reward/mean": _mean(rewards),
        "reward/std": float(statistics.pstdev(rewards)),
        "reward/core": _mean(CORE_SCALE * b.rigor * b.feasibility * b.fidelity for b in breakdowns),
        "reward/lab_manager": _mean(role_reward(log, "lab_manager") for log in logs),
    }
    for name in COMPONENTS:
        out[f"reward/{name}"] = _mean(getattr(b, name) for b in breakdowns)
    for name in sorted({k for b in breakdowns for k in b.penalties}):
        out[f"penalty/{name}"] = _mean(b.penalties.get(name, 0.0) for b in breakdowns)

    turns = [t for log in logs for t in log.turns]
    out["episode/count"] = float(len(logs))
    out["episode/agreement_rate"] = _mean(float(log.agreement_reached) for log in logs)
    out["episode/timeout_rate"] = _mean(float(log.truncated) for log in logs)
    out["episode/rounds"] = _mean(log.rounds_used for log in logs)
    out["episode/invalid_action_rate"] = _mean(float(t.error is not None) for t in turns)
    out["episode/parse_failure_rate"] = _mean(float(t.action is None) for t in turns)
    for role in sorted({t.role for t in turns}):
        mine = [t for t in turns if t.role == role]
        out[f"by_role/{role}/invalid_action_rate"] = _mean(float(t.error is not None) for t in mine)
        out[f"by_role/{role}/parse_failure_rate"] = _mean(float(t.action is None) for t in mine)

    for skill, (used, chances) in skill_use(logs).items():
        out[f"skill/{skill}/use_rate"] = used / chances if chances else 0.0
        out[f"skill/{skill}/count"] = float(chances)

    by_difficulty: dict[str, list[EpisodeLog]] = defaultdict(list)
    for log in logs:
        by_difficulty[log.difficulty].append(log)
    for difficulty, group in sorted(by_difficulty.items()):
        out[f"by_difficulty/{difficulty}/reward"] = _mean(log.total_reward for log in group)
        out[f"by_difficulty/{difficulty}/agreement_rate"] = _mean(float(log.agreement_reached) for log in group)
        out[f"by_difficulty/{difficulty}/count"] = float(len(group))
    by_cell: dict[tuple[str, str], list[float]] = defaultdict(list)
    for log in logs:
        by_cell[log.scenario_template, log.difficulty].append(log.total_reward)
    for (template, difficulty), values in sorted(by_cell.items()):
        out[f"by_cell/{template}/{difficulty}/reward"] = _mean(values)
        out[f"by_cell/{template}/{difficulty}/count"] = float(len(values))
    return out
