"""What each skill of the game is worth, measured with scripted agents (``replicalab bench skills``).

- The skill table: every combination of the Scientist's skills (``replicalab.agents.skilled``) against one
  Lab Manager on the same episodes; each skill's value alone (its Scientist minus the naive one) and added
  last (all skills minus the other two), as paired differences with 95% intervals.
- The Lab Manager matrix: every scripted Lab Manager policy against a row of Scientists, both roles'
  rewards, and for each Scientist the lab's best policy with its paired margin.
- The ceilings: the oracle Scientist (proposes the hidden reference) and a brute-force search over the
  hidden scenario (every technique, every combination of its slot options, every duration the lab
  allows, the required controls at the minimum sample size), judged as an agreement in the fewest rounds.

Pure: episodes are played with ``run_episode`` on the seeds given; nothing reads the clock.
"""

from __future__ import annotations

import itertools
import math
import statistics
from dataclasses import dataclass
from typing import Sequence

from replicalab.agents import SCIENTIST_FACTORIES, SKILLS, skills_name
from replicalab.env import ReplicaLabEnv
from replicalab.episode import run_episode
from replicalab.judge import EpisodeFacts, judge
from replicalab.judge.constants import FASTEST_AGREEMENT_ROUNDS
from replicalab.lab import DEFAULT_LAB_POLICY, LAB_POLICIES
from replicalab.metrics import role_reward
from replicalab.models import EpisodeLog, Protocol
from replicalab.scenario_records import Scenario
from replicalab.scenarios import cells, generate_scenario

Z95 = 1.96
#: The Scientists the Lab Manager matrix crosses with every lab policy.
MATRIX_SCIENTISTS = ("naive", *(skills_name([s]) for s in SKILLS), skills_name(SKILLS))
ALL_SKILLS = skills_name(SKILLS)


@dataclass(frozen=True)
class Estimate:
    """A mean with its 95% interval (normal approximation) over ``n`` values."""

    mean: float
    low: float
    high: float
    n: int

    def __str__(self) -> str:
        return f"{self.mean:+.2f} [{self.low:+.2f}, {self.high:+.2f}]"


def estimate(values: Sequence[float]) -> Estimate:
    mean = statistics.fmean(values)
    half = Z95 * statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0
    return Estimate(mean, mean - half, mean + half, len(values))


def paired(a: Sequence[float], b: Sequence[float]) -> Estimate:
    """``a - b`` episode by episode (the same scenarios in the same order)."""
    return estimate([x - y for x, y in zip(a, b, strict=True)])


def episodes(scientist: str, lab: str, seeds: Sequence[int]) -> list[EpisodeLog]:
    """``scientist`` against the scripted Lab Manager ``lab`` on every cell x ``seeds``, cells outermost."""
    env, make = ReplicaLabEnv(), SCIENTIST_FACTORIES[scientist]
    return [run_episode(env, make(seed, t, d), lab, seed=seed, template=t, difficulty=d)
            for t, d in cells() for seed in seeds]


def rewards(logs: Sequence[EpisodeLog], role: str = "scientist") -> list[float]:
    return [role_reward(log, role) for log in logs]


def skill_table(seeds: Sequence[int], lab: str = DEFAULT_LAB_POLICY) -> dict:
    """``{"means": {name: Estimate}, "alone": {skill: Estimate}, "last": {skill: Estimate}}`` of the
    Scientist's reward against ``lab``: every combination of skills, each skill alone and added last."""
    combos = [c for k in range(len(SKILLS) + 1) for c in itertools.combinations(SKILLS, k)]
    scores = {skills_name(c): rewards(episodes(skills_name(c), lab, seeds)) for c in combos}
    naive, full = scores["naive"], scores[ALL_SKILLS]
    return {
        "means": {name: estimate(v) for name, v in scores.items()},
        "alone": {s: paired(scores[skills_name([s])], naive) for s in SKILLS},
        "last": {s: paired(full, scores[skills_name([o for o in SKILLS if o != s])]) for s in SKILLS},
    }


def lab_matrix(seeds: Sequence[int], scientists: Sequence[str] = MATRIX_SCIENTISTS) -> dict:
    """``{"cells": {(lab, scientist): {"lab_manager", "scientist": Estimate, "agreement": float}},
    "best": {scientist: (lab, Estimate of its margin over the next best policy)}}``."""
    out: dict = {"cells": {}, "best": {}}
    for name in scientists:
        lab_rewards = {}
        for lab in LAB_POLICIES:
            logs = episodes(name, lab, seeds)
            lab_rewards[lab] = rewards(logs, "lab_manager")
            out["cells"][lab, name] = {
                "lab_manager": estimate(lab_rewards[lab]), "scientist": estimate(rewards(logs)),
                "agreement": statistics.fmean(float(log.agreement_reached) for log in logs),
            }
        ranked = sorted(LAB_POLICIES, key=lambda lab: -statistics.fmean(lab_rewards[lab]))
        out["best"][name] = (ranked[0], paired(lab_rewards[ranked[0]], lab_rewards[ranked[1]]))
    return out


def _candidates(scenario: Scenario):
    """Every plan of the brute-force search: each technique, each combination of its slot options, each
    duration from the technique's minimum to the lab's limit; the required controls, the minimum sample size."""
    ref, lab = scenario.reference, scenario.lab
    for technique in scenario.techniques.values():
        for items in itertools.product(*technique.equipment_slots, *technique.reagent_slots):
            n_eq = len(technique.equipment_slots)
            for days in range(technique.min_days, lab.time_limit_days + 1):
                yield Protocol.model_construct(
                    sample_size=ref.min_sample_size, controls=list(ref.required_controls), technique=technique.id,
                    duration_days=days, required_equipment=list(items[:n_eq]),
                    required_reagents=list(items[n_eq:]) + list(ref.critical_items), rationale="search",
                )


def brute_force(seed: int, template: str, difficulty: str, max_rounds: int) -> float:
    """The best Scientist reward any searched plan earns as an agreement in the fewest rounds."""
    scenario = generate_scenario(seed, template, difficulty)
    facts = EpisodeFacts(agreement=True, rounds_used=FASTEST_AGREEMENT_ROUNDS, max_rounds=max_rounds)
    return max(judge(p, scenario, facts).total for p in _candidates(scenario))


def ceilings(seeds: Sequence[int], lab: str = DEFAULT_LAB_POLICY) -> dict[str, Estimate]:
    """The oracle Scientist's reward against ``lab`` and the brute-force ceiling, on the same episodes."""
    max_rounds = ReplicaLabEnv().max_rounds
    return {
        "oracle": estimate(rewards(episodes("oracle", lab, seeds))),
        "brute_force": estimate([brute_force(seed, t, d, max_rounds) for t, d in cells() for seed in seeds]),
    }
