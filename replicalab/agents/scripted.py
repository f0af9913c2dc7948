"""Scripted Scientists: baselines and test drivers.  Build a fresh one per episode."""

from __future__ import annotations

import random
from typing import Callable

from replicalab.agents.brief import published_protocol
from replicalab.agents.skilled import SKILL_SCIENTISTS
from replicalab.models import ScientistAction, ScientistObservation
from replicalab.models import ScientistActionType as SA
from replicalab.scenario_records import Scenario

ACCEPT = ScientistAction(action_type=SA.ACCEPT)


class NaiveScientist:
    """Proposes the paper's protocol as written and accepts whatever comes."""

    def __call__(self, obs: ScientistObservation) -> ScientistAction:
        if obs.current_protocol is None:
            return ScientistAction(
                action_type=SA.PROPOSE_PROTOCOL, rationale="Replicate the paper exactly as published.",
                **published_protocol(obs),
            )
        return ACCEPT


class OracleScientist:
    """Reads the hidden reference: proposes the feasible reference protocol, then accepts."""

    def __init__(self, scenario: Scenario) -> None:
        self.reference = scenario.reference_protocol

    def __call__(self, obs: ScientistObservation) -> ScientistAction:
        if obs.current_protocol is None:
            r = self.reference
            return ScientistAction(
                action_type=SA.PROPOSE_PROTOCOL, technique=r.technique, sample_size=r.sample_size,
                controls=r.controls, duration_days=r.duration_days, required_equipment=r.required_equipment,
                required_reagents=r.required_reagents, rationale=r.rationale,
            )
        return ACCEPT


RANDOM_QUESTIONS = ("What is the budget?", "How many staff?", "Any safety rules?", "How many days?")


class RandomScientist:
    """Random valid actions drawn from the brief's vocabulary (a lower baseline)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def __call__(self, obs: ScientistObservation) -> ScientistAction:
        rng = self.rng
        kind = rng.choice(list(SA))
        if kind is SA.ACCEPT:
            return ACCEPT
        if kind is SA.REQUEST_INFO:
            return ScientistAction(action_type=kind, questions=rng.sample(RANDOM_QUESTIONS, rng.randint(1, 2)))
        brief = published_protocol(obs)
        pick = lambda xs: rng.sample(xs, rng.randint(0, len(xs)))  # noqa: E731
        return ScientistAction(
            action_type=kind, technique=brief.get("technique", "unknown_technique"),
            sample_size=rng.randint(1, 300), controls=pick(brief.get("controls", [])),
            duration_days=rng.randint(0, 30), required_equipment=pick(brief.get("required_equipment", [])),
            required_reagents=pick(brief.get("required_reagents", [])), rationale="A random plan.",
        )


def _oracle(seed: int, template: str, difficulty: str) -> OracleScientist:
    from replicalab.scenarios import generate_scenario

    return OracleScientist(generate_scenario(seed, template, difficulty))


#: Every scripted Scientist by name, as a factory ``(seed, template, difficulty) -> fresh agent``.
SCIENTIST_FACTORIES: dict[str, Callable[[int, str, str], Callable[[ScientistObservation], ScientistAction]]] = {
    "naive": lambda seed, template, difficulty: NaiveScientist(),
    **SKILL_SCIENTISTS,
    "oracle": _oracle,
    "random": lambda seed, template, difficulty: RandomScientist(seed),
}
