"""Scripted Scientists with any combination of the game's three skills, each from visible facts only.

- ``read``: when the Lab Manager moves the plan to a technique that is not the brief's cross-check
  method, revise (once) to the brief's cross-check protocol;
- ``defend``: open (and write every own plan) at the minimum sample size the brief's power analysis
  states, and counter (at most MAX_COUNTERS times) a suggestion that drops one of the brief's controls or
  cuts the sample size below that minimum: the suggestion with the controls restored and the minimum back;
- ``ask``: when the Lab Manager names an item of the Scientist's own plan it cannot use, ask what can
  replace it, then revise that plan with the stand-ins the answer names.

Without skills it is the naive Scientist's play (propose the published protocol, accept whatever comes).
A skill acts only where its trigger shows; where several could act, read goes first, then ask, then
defend.  ``SKILL_SCIENTISTS`` names every combination for the seat vocabulary.

With ``rate`` set, the Scientist decides per chance instead of per episode: at each turn where a skill's
trigger shows it uses the skill with probability ``rate`` (a coin of its own ``random.Random(seed)``), and
at its opening it writes the brief's minimum sample size with the same probability.  Each coin is
independent of the others, so what it did earlier says nothing about what it does at the next chance (the
warm start's transcripts: ``training.model.sft_data``).
"""

from __future__ import annotations

import random
from itertools import combinations
from typing import Callable, Iterable, Optional

from replicalab.agents.brief import (
    CROSS_CHECK_RATIONALE,
    cross_check_method,
    lab_message,
    last_lab_manager_action,
    last_suggestion,
    minimum_sample_size,
    published_protocol,
    stand_ins,
    suggested_plan,
    unusable_items,
)
from replicalab.models import ScientistAction, ScientistObservation
from replicalab.models import ScientistActionType as SA

SKILLS = ("read", "defend", "ask")
#: The order in which skills get to act on a turn.
PRECEDENCE = ("read", "ask", "defend")
#: The seat name of each skill alone; a combination joins them with "+" in SKILLS order.
SKILL_NAMES = {"read": "reader", "defend": "defender", "ask": "asker"}
MAX_COUNTERS = 2
OPENING_RATIONALE = "Start from the published protocol."
COUNTER_RATIONALE = "Keep the paper's controls and the sample size its power analysis needs."
STAND_IN_RATIONALE = "Use the stand-ins the lab has."
ACCEPT = ScientistAction(action_type=SA.ACCEPT)


def skills_name(skills: Iterable[str]) -> str:
    """The seat name of a combination of skills (``reader+asker``); ``naive`` for none."""
    chosen = set(skills)
    return "+".join(SKILL_NAMES[s] for s in SKILLS if s in chosen) or "naive"


class SkilledScientist:
    """A scripted Scientist playing ``skills`` (a subset of SKILLS).  Build a fresh one per episode."""

    def __init__(self, skills: Iterable[str] = (), *, rate: Optional[float] = None, seed: int = 0) -> None:
        self.skills = frozenset(skills)
        unknown = self.skills - set(SKILLS)
        if unknown:
            raise ValueError(f"unknown skills {sorted(unknown)}; valid: {', '.join(SKILLS)}")
        if rate is not None and not 0.0 <= rate <= 1.0:
            raise ValueError(f"rate must be within [0, 1], got {rate}")
        self.rate = rate
        self.rng = random.Random(seed)
        self.switched = False
        self.counters = 0
        self.asked: set[str] = set()
        self.plan: dict = {}
        # whether own plans carry the brief's minimum sample size (the defend skill; per-chance: a coin at the opening)
        self.at_minimum = "defend" in self.skills

    def _coin(self) -> bool:
        """Whether to use a skill at this chance: always per episode, with probability ``rate`` per chance."""
        return self.rate is None or self.rng.random() < self.rate

    def _write(self, kind: SA, fields: dict, rationale: str, obs: ScientistObservation) -> ScientistAction:
        fields = dict(fields)
        minimum = minimum_sample_size(obs)
        if self.at_minimum and minimum:
            fields["sample_size"] = minimum
        self.plan = fields
        return ScientistAction(action_type=kind, rationale=rationale, **fields)

    def __call__(self, obs: ScientistObservation) -> ScientistAction:
        if obs.current_protocol is None:
            self.at_minimum = "defend" in self.skills and self._coin()
            return self._write(SA.PROPOSE_PROTOCOL, published_protocol(obs), OPENING_RATIONALE, obs)
        if last_lab_manager_action(obs) == "accept":
            return ACCEPT
        for skill in PRECEDENCE:
            if skill in self.skills:
                before = (self.switched, self.counters, set(self.asked), self.plan, self.at_minimum)
                action = getattr(self, f"_{skill}")(obs)
                if action is not None and self._coin():
                    return action
                self.switched, self.counters, self.asked, self.plan, self.at_minimum = before  # declined
        return ACCEPT

    def _read(self, obs: ScientistObservation) -> ScientistAction | None:
        moved = last_suggestion(obs).get("technique", "")
        method = cross_check_method(obs)
        if self.switched or not method or not moved or moved == method["technique"]:
            return None
        self.switched = True
        return self._write(SA.REVISE_PROTOCOL, method, CROSS_CHECK_RATIONALE, obs)

    def _ask(self, obs: ScientistObservation) -> ScientistAction | None:
        items = self.plan.get("required_equipment", []) + self.plan.get("required_reagents", [])
        offered = stand_ins(obs)
        if offered and any(i in offered for i in items):
            fields = dict(self.plan)
            for key in ("required_equipment", "required_reagents"):
                fields[key] = [offered.get(i, i) for i in fields[key]]
            return self._write(SA.REVISE_PROTOCOL, fields, STAND_IN_RATIONALE, obs)
        named = [i for i in unusable_items(lab_message(obs), items) if i not in self.asked]
        if not named:
            return None
        self.asked.update(named)
        return ScientistAction(action_type=SA.REQUEST_INFO, questions=[f"What can replace {i}?" for i in named])

    def _defend(self, obs: ScientistObservation) -> ScientistAction | None:
        offer = suggested_plan(obs)
        brief = published_protocol(obs)
        minimum = minimum_sample_size(obs)
        if not offer or not brief or self.counters >= MAX_COUNTERS:
            return None
        dropped = [c for c in brief["controls"] if c not in offer["controls"]]
        if not dropped and offer["sample_size"] >= minimum:
            return None
        self.counters += 1
        self.at_minimum = True
        offer["controls"] = offer["controls"] + dropped
        return self._write(SA.REVISE_PROTOCOL, offer, COUNTER_RATIONALE, obs)


def _factory(skills: tuple[str, ...]) -> Callable[[int, str, str], SkilledScientist]:
    return lambda seed, template, difficulty: SkilledScientist(skills)


#: Every combination of one or more skills by seat name (``reader``, ``defender+asker``, ...), as a factory
#: ``(seed, template, difficulty) -> fresh agent``; no skills is ``naive``.
SKILL_SCIENTISTS: dict[str, Callable[[int, str, str], SkilledScientist]] = {
    skills_name(combo): _factory(combo) for k in range(1, len(SKILLS) + 1) for combo in combinations(SKILLS, k)
}
