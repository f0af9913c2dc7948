"""Where each Scientist skill could act in an episode, and whether the Scientist used it.

A *chance* for a skill is a Scientist turn at which the skill's trigger shows in the Scientist's own view
(the rules of ``replicalab.agents.skilled``, read from visible facts only):

- ``read``: the Lab Manager's latest suggestion moves the plan to a technique that is not the brief's
  cross-check method, and the Scientist has not yet written that method; used when the turn revises to the
  cross-check technique;
- ``defend``: the latest suggestion drops one of the brief's controls or cuts the sample size below the
  brief's minimum; used when the turn revises with every brief control and at least the minimum;
- ``ask``: the Lab Manager's latest message names an item of the Scientist's own latest plan as unusable;
  used when the turn asks about one of those items.

``skill_chances(log)`` replays the log's turns (``replicalab.episode.replayed_views``) to see each
Scientist view; ``skill_use(logs)`` sums them per skill.  Training logs the rates by step
(``skill/<skill>/use_rate``) and evaluation per agent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Optional

from replicalab.agents.brief import (
    cross_check_method,
    lab_message,
    last_suggestion,
    minimum_sample_size,
    published_protocol,
    suggested_plan,
    unusable_items,
)
from replicalab.agents.skilled import MAX_COUNTERS, PRECEDENCE, SKILLS
from replicalab.episode import replayed_views
from replicalab.models import EpisodeLog, ScientistObservation
from replicalab.models import ScientistActionType as SA

_PLAN_TYPES = (SA.PROPOSE_PROTOCOL.value, SA.REVISE_PROTOCOL.value)


@dataclass(frozen=True)
class SkillChance:
    """One Scientist turn at which ``skill``'s trigger showed; ``used``: the turn did what the skill does;
    ``turn``: its index among the episode's Scientist turns."""

    skill: str
    used: bool
    turn: int = 0


@dataclass
class _Past:
    """What the Scientist did earlier in the episode: its plans, the items it asked about, its counters."""

    plans: list[dict] = field(default_factory=list)
    asked: set[str] = field(default_factory=set)
    counters: int = 0

    def items(self) -> list[str]:
        """The equipment and reagents of the Scientist's latest plan."""
        own = self.plans[-1] if self.plans else {}
        return own.get("required_equipment", []) + own.get("required_reagents", [])


def _read(obs: ScientistObservation, action: dict, past: _Past) -> Optional[bool]:
    moved, method = last_suggestion(obs).get("technique", ""), cross_check_method(obs)
    if not method or not moved or moved == method["technique"]:
        return None
    if any(plan.get("technique") == method["technique"] for plan in past.plans):
        return None
    return action.get("action_type") == SA.REVISE_PROTOCOL.value and action.get("technique") == method["technique"]


def _defend(obs: ScientistObservation, action: dict, past: _Past) -> Optional[bool]:
    offer, brief, minimum = suggested_plan(obs), published_protocol(obs), minimum_sample_size(obs)
    if not offer or not brief or past.counters >= MAX_COUNTERS:
        return None
    if all(c in offer["controls"] for c in brief["controls"]) and offer["sample_size"] >= minimum:
        return None
    return (action.get("action_type") == SA.REVISE_PROTOCOL.value and action.get("technique") == offer["technique"]
            and all(c in action.get("controls", ()) for c in brief["controls"])
            and action.get("sample_size", 0) >= minimum)


def _ask(obs: ScientistObservation, action: dict, past: _Past) -> Optional[bool]:
    named = [i for i in unusable_items(lab_message(obs), past.items()) if i not in past.asked]
    if not named:
        return None
    return any(item in q for q in _questions(action) for item in named)


def _questions(action: dict) -> list[str]:
    return list(action.get("questions", ())) if action.get("action_type") == SA.REQUEST_INFO.value else []


_TRIGGERS = {"read": _read, "defend": _defend, "ask": _ask}
assert tuple(_TRIGGERS) == SKILLS


def skill_chances(log: EpisodeLog) -> list[SkillChance]:
    """Every chance of every skill in ``log``, in turn order (skills in ``SKILLS`` order within a turn).  An
    invalid Scientist turn at a chance counts as not using the skill."""
    past = _Past()
    out: list[SkillChance] = []
    own_turns = 0
    for turn, view in replayed_views(log):
        action = turn.action or {}
        if turn.role == "scientist":
            chances = [SkillChance(skill, used, own_turns) for skill, trigger in _TRIGGERS.items()
                       if (used := trigger(view, action, past)) is not None]
            own_turns += 1
            if chances:  # where several skills could act, the turn is the chance of the one that goes first
                out.append(min(chances, key=lambda c: PRECEDENCE.index(c.skill)))
            past.counters += any(c.skill == "defend" and c.used for c in chances)
            past.asked.update(i for q in _questions(action) for i in _items_named(q, past))
            if action.get("action_type") in _PLAN_TYPES:
                past.plans.append(action)
    return out


def _items_named(question: str, past: _Past) -> list[str]:
    return [i for i in past.items() if i in question]


def skill_use(logs: Iterable[EpisodeLog]) -> dict[str, tuple[int, int]]:
    """``{skill: (chances used, chances)}`` over ``logs``, every skill present (``(0, 0)`` when it never showed)."""
    counts = {skill: [0, 0] for skill in SKILLS}
    for log in logs:
        for chance in skill_chances(log):
            counts[chance.skill][0] += chance.used
            counts[chance.skill][1] += 1
    return {skill: (used, total) for skill, (used, total) in counts.items()}
