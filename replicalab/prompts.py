"""Observation -> chat messages for a policy model.

``build_messages(observation)`` returns ``[system, user]``.  The system message (role, goal, the exact
JSON action format and its rules) is derived from the role's pydantic action model and docstring, so
it cannot drift from the contract; it is constant per role and cached.  The user message holds only
the fields of the observation it was given -- a Scientist prompt is built from a
``ScientistObservation`` alone and so can never carry lab facts.

With a ``token_budget`` the oldest dialogue entries are replaced by one "(N earlier messages
omitted)" line until the messages fit; the system message, the facts and the current protocol are
never dropped.  Same observation -> identical messages.
"""

from __future__ import annotations

import json
from enum import Enum
from functools import lru_cache
from typing import Any, Callable, Union, get_args, get_origin

from annotated_types import Ge
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from replicalab.judge import constants as J
from replicalab.models import (
    ConversationEntry,
    LabManagerAction,
    LabManagerActionType,
    LabManagerObservation,
    LabTechnique,
    Protocol,
    ScientistAction,
    ScientistActionType,
    ScientistObservation,
)
from replicalab.parsing import ACTION_MODELS, field_order, format_action
from replicalab.dialogue import render_protocol, suggested_fields, suggestion_in
from replicalab.scenario_records import power_statement

PromptObservation = Union[ScientistObservation, LabManagerObservation]
Messages = list[dict[str, str]]

CHARS_PER_TOKEN = 4
MAX_ENTRY_CHARS = 1000
REPLY_INSTRUCTION = "Reply with exactly one JSON object."
#: Opens the Scientist's follow-up line that restates a suggestion under a reply's keys (``_change_lines``).
LAB_TERMS = "The lab's terms: "

_ROLE_NAMES = {"scientist": "Scientist", "lab_manager": "Lab Manager"}
_GOALS = {
    "scientist": (
        "Agree with the lab manager on a protocol that replicates the paper faithfully, rigorously "
        "and feasibly. You see the paper, not the lab: learn its limits from the lab manager."
    ),
    "lab_manager": (
        "Keep the plan within the lab's budget, equipment, reagents, schedule, staff and safety "
        "rules, and suggest concrete alternatives. Your flags must be the truth about the plan; the lab's "
        f"records answer the scientist's questions. On agreement you earn {J.LAB_CORE_WEIGHT:g} x the judge's "
        f"0-10 score of the plan plus {J.LAB_BUDGET_WEIGHT:g} x the share of the budget left unspent, minus "
        f"{J.LAB_ROUND_COST:g} for each round beyond round {J.FASTEST_AGREEMENT_ROUNDS}; no agreement costs "
        f"{J.NO_AGREEMENT_PENALTY:g}."
    ),
}
_EXTRA_RULES = {
    "scientist": (),
    "lab_manager": ("A suggested_* field replaces that part of the plan; empty or 0 means no change.",),
}
_EXAMPLES: dict[str, Callable[[], BaseModel]] = {
    "scientist": lambda: ScientistAction(
        action_type=ScientistActionType.REQUEST_INFO, questions=["What is the budget?"]
    ),
    "lab_manager": lambda: LabManagerAction(
        action_type=LabManagerActionType.ACCEPT, feasible=True, budget_ok=True, equipment_ok=True,
        reagents_ok=True, schedule_ok=True, staff_ok=True, explanation="The plan fits the lab.",
    ),
}


def default_count_tokens(text: str) -> int:
    """A cheap, tokenizer-free estimate: about four characters per token."""
    return len(text) // CHARS_PER_TOKEN + 1


def _type_text(info: FieldInfo) -> str:
    annotation = info.annotation
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return "one of " + " | ".join(str(member.value) for member in annotation)
    if get_origin(annotation) is list:
        (item,) = get_args(annotation)
        return f"list of {item.__name__ if item is not str else 'strings'}"
    names = {bool: "true or false", int: "integer", str: "string", float: "number"}
    text = names.get(annotation, str(annotation)) if isinstance(annotation, type) else str(annotation)
    bounds = [f">= {m.ge}" for m in info.metadata if isinstance(m, Ge)]
    return " ".join([text, *bounds])


def _field_line(name: str, info: FieldInfo) -> str:
    if info.is_required():
        return f"- {name}: {_type_text(info)}, required"
    default = json.dumps(info.get_default(call_default_factory=True))
    return f"- {name}: {_type_text(info)}, default {default}"


def _docstring_rules(model: type[BaseModel]) -> list[str]:
    """The ``- ...`` bullets of the model's docstring (its validation rules in words), one line each,
    with Python's ``True``/``False`` spelled as JSON."""
    rules: list[str] = []
    open_bullet = False
    for line in (model.__doc__ or "").splitlines():
        text = line.strip()
        if text.startswith("- "):
            rules.append(text)
        elif text and open_bullet:
            rules[-1] += " " + text
        open_bullet = bool(text) and bool(rules) and (open_bullet or text.startswith("- "))
    return [rule.replace("=True", "=true").replace("=False", "=false") for rule in rules]


@lru_cache(maxsize=None)
def system_prompt(role: str) -> str:
    """The constant system message for ``role`` ("scientist" or "lab_manager")."""
    model = ACTION_MODELS[role]
    lines = [
        f"You are the {_ROLE_NAMES[role]} in ReplicaLab, a negotiation over an experiment protocol.",
        f"Goal: {_GOALS[role]}",
        "Each turn, act with one JSON object with these fields (omitted fields take their default; "
        "no other keys; lists hold non-empty strings):",
        *(_field_line(name, model.model_fields[name]) for name in field_order(model)),
        "Rules:",
        *_docstring_rules(model),
        *(f"- {rule}" for rule in _EXTRA_RULES[role]),
        f"Example: {format_action(_EXAMPLES[role]())}",  # type: ignore[arg-type]
        REPLY_INSTRUCTION,
    ]
    return "\n".join(lines)


def _items(values: list[str]) -> str:
    return ", ".join(values) if values else "none"


def _protocol_line(protocol: Protocol | None, *, plain: bool = False) -> str:
    """The current protocol as JSON, or (``plain``) in the dialogue's ``technique=...; ...`` form."""
    if protocol is None:
        return "Current protocol: none yet"
    if plain:
        return f"Current protocol: {render_protocol(protocol)}"
    return "Current protocol: " + json.dumps(
        protocol.model_dump(mode="json"), ensure_ascii=False, separators=(",", ":")
    )


def _check_line(observation: LabManagerObservation) -> str:
    """The lab's check of the current protocol (``LabManagerObservation.plan_check``), on a line of its own as a
    JSON object: its verdict on each flag and on the whole plan, written as an action's flags are, then the
    reasons the plan fails (``{"budget_ok":false,...,"feasible":false,"reasons":["over the lab's budget"]}``).
    The verdict is the lab's own record, not a move: which action to take, and what to suggest, stays the Lab
    Manager's."""
    check = observation.plan_check
    if not check:
        return "Lab check of the current protocol: none yet"
    verdict: dict[str, object] = {flag: not why for flag, why in check.items()}
    verdict["feasible"] = all(verdict.values())
    verdict["reasons"] = [reason for why in check.values() for reason in why]
    return "Lab check of the current protocol:\n" + json.dumps(verdict, ensure_ascii=False, separators=(",", ":"))


def _entry_line(entry: ConversationEntry) -> str:
    message = " ".join(entry.message.split())
    if len(message) > MAX_ENTRY_CHARS:
        message = message[: MAX_ENTRY_CHARS - 3] + "..."
    kind = f" ({entry.action_type})" if entry.action_type else ""
    return f"[round {entry.round_number}] {entry.role}{kind}: {message}"


def _facts(observation: PromptObservation) -> list[str]:
    obs = observation
    if isinstance(obs, ScientistObservation):
        return [
            f"Paper: {obs.paper_title}",
            f"Hypothesis: {obs.paper_hypothesis}",
            f"Method: {obs.paper_method}",
            f"Key finding: {obs.paper_key_finding}",
            f"Goal: {obs.experiment_goal}",
        ]
    return [
        f"Budget: {obs.budget_total:.2f} total, {obs.budget_remaining:.2f} remaining",
        f"Equipment available: {_items(obs.equipment_available)}",
        f"Equipment booked: {_items(obs.equipment_booked)}",
        f"Reagents in stock: {_items(obs.reagents_in_stock)}",
        f"Reagents out of stock: {_items(obs.reagents_out_of_stock)}",
        f"Staff: {obs.staff_count}",
        f"Time limit: {obs.time_limit_days} days",
        f"Safety restrictions: {_items(obs.safety_restrictions)}",
        "Prices of the current plan: " + (
            ", ".join(f"{c} {cost:.2f}" for c, cost in obs.control_costs.items()) + "; " if obs.control_costs else ""
        ) + f"one sample {obs.cost_per_sample:.2f}",
        "Techniques the lab runs, in its order of preference: " + (
            "; ".join(_technique_text(t) for t in obs.lab_techniques) or "none"),
    ]


def _technique_text(technique: LabTechnique) -> str:
    """``id (at least N days; equipment: a or b, c; reagents: d)``: one item of each comma-separated slot, any of
    its ``or`` options."""
    def slots(values: list[list[str]]) -> str:
        return ", ".join(" or ".join(slot) for slot in values) or "none"

    return (f"{technique.id} (at least {technique.min_days} days; equipment: {slots(technique.equipment_slots)}; "
            f"reagents: {slots(technique.reagent_slots)})")


def _user_text(head: list[str], dialogue: list[str], omitted: int, role: str, tail: list[str]) -> str:
    shown = dialogue[omitted:]
    lines = [*head, "Dialogue:" if dialogue else "Dialogue: none yet"]
    if omitted:
        lines.append(f"({omitted} earlier messages omitted)")
    lines += shown
    lines += tail
    lines.append(f"Your move as the {_ROLE_NAMES[role]}. {REPLY_INSTRUCTION}")
    return "\n".join(lines)


def build_messages(
    observation: PromptObservation,
    *,
    token_budget: int | None = None,
    count_tokens: Callable[[str], int] | None = None,
) -> Messages:
    """Chat messages (``[{"role": "system", ...}, {"role": "user", ...}]``) for the acting role.

    The role follows from the observation's type.  With ``token_budget``, the oldest dialogue
    entries are omitted until ``sum(count_tokens(m["content"]))`` fits; if nothing fits, the version
    with no dialogue is returned (never an error).  ``count_tokens`` defaults to
    ``default_count_tokens``.
    """
    if isinstance(observation, ScientistObservation):
        role = "scientist"
    elif isinstance(observation, LabManagerObservation):
        role = "lab_manager"
    else:
        raise TypeError(f"expected a ScientistObservation or LabManagerObservation, got {type(observation).__name__}")
    system = system_prompt(role)
    head = [
        *_facts(observation),
        f"Round {observation.round_number} of {observation.max_rounds}",
        _protocol_line(observation.current_protocol),
    ]
    tail = [_check_line(observation)] if isinstance(observation, LabManagerObservation) else []
    dialogue = [_entry_line(entry) for entry in observation.conversation_history]
    omitted = 0
    if token_budget is not None:
        count = count_tokens or default_count_tokens
        system_tokens = count(system)
        while omitted < len(dialogue):
            if system_tokens + count(_user_text(head, dialogue, omitted, role, tail)) <= token_budget:
                break
            omitted += 1
    user = _user_text(head, dialogue, omitted, role, tail)
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


#: What the Lab Manager's latest turn did, in plain words, by its action type (suggestions are spelled
#: out field by field by ``_change_lines``).
_LAB_TURN_TEXT = {
    "accept": "The lab accepted the plan.",
    "reject": "The lab rejected the plan and offered no alternative.",
    "report_feasibility": "The lab reported on the plan and suggested no change.",
}
#: How each suggested field other than the technique is named in the plain statement of a suggestion.
_CHANGE_NOUNS = {"sample_size": "sample size", "controls": "controls", "duration_days": "duration",
                 "equipment": "equipment", "reagents": "reagents"}


def _and(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _change_lines(observation: ScientistObservation) -> list[str]:
    """What the Lab Manager's latest turn changed, stated plainly (empty unless the latest dialogue
    entry is the Lab Manager's).  A moved technique is its own sentence, first; the other suggested
    fields are named; then the whole suggestion under the keys a reply writes it with, in the reply's order
    (``The lab's terms: {"sample_size":12,"technique":"x","required_equipment":["a"]}.``): the lab's message
    writes ``technique=x; equipment=a``, and a seat that copies a field by the key before it finds the lab's
    value only under the reply's key.  The line is the lab's suggestion alone, never a reply: what to keep of
    it, and what to send, is the Scientist's to work out."""
    history = observation.conversation_history
    if not history or history[-1].role != "lab_manager":
        return []
    last = history[-1]
    suggested = suggestion_in(last.message)
    if last.action_type != "suggest_alternative" or not suggested:
        text = _LAB_TURN_TEXT.get(last.action_type or "")
        return [text] if text else []
    lines = []
    if "technique" in suggested:
        plan = observation.current_protocol
        before = plan.technique if plan is not None else "none"
        lines.append(f"The lab moved the technique from {before} to {suggested['technique']}.")
    others = [noun for name, noun in _CHANGE_NOUNS.items() if name in suggested]
    if others:
        lines.append(f"The lab {'also ' if lines else ''}changed the {_and(others)}.")
    typed = suggested_fields(suggested)
    terms = {name: typed[name] for name in field_order(ScientistAction) if name in typed}
    if terms:
        lines.append(f"{LAB_TERMS}{json.dumps(terms, separators=(',', ':'))}.")
    return lines


def followup_message(observation: PromptObservation, seen: int) -> dict[str, str]:
    """The user message of a later turn in an append-only chat: what happened since the role's
    previous turn (dialogue entries from index ``seen`` on, except the role's own, which the chat
    already holds as the assistant's reply), the round and the current protocol, then, right before the
    reply: for the Scientist, what the Lab Manager's latest turn changed, in plain words ("The lab moved
    the technique from X to Y.", "The lab rejected the plan and offered no alternative."); for the Lab
    Manager, the lab's check of the current protocol (``_check_line``).  The Scientist's ends with its
    brief's power statement (``POWER_STATEMENT``, verbatim), beside the plan it may revise.

    The Scientist's follow-up names the current protocol in the dialogue's plain form, not as JSON:
    its chat already holds that protocol as its own JSON reply, and the only protocols written as JSON
    in its chat stay the brief's two and its own (with the lab's suggested numbers and the power
    analysis's minimum), so a model copying a protocol field by field has few places to copy from."""
    role = "scientist" if isinstance(observation, ScientistObservation) else "lab_manager"
    news = [_entry_line(e) for e in observation.conversation_history[seen:] if e.role != role]
    scientist = role == "scientist"
    statements = [*_change_lines(observation), power_statement(observation.paper_key_finding)[0]] if scientist \
        else [_check_line(observation)]
    lines = [*(news or ["(no new messages)"]),
             f"Round {observation.round_number} of {observation.max_rounds}",
             _protocol_line(observation.current_protocol, plain=scientist),
             *filter(None, statements),
             f"Your move as the {_ROLE_NAMES[role]}. {REPLY_INSTRUCTION}"]
    return {"role": "user", "content": "\n".join(lines)}


class RoleChat:
    """The append-only chat of one role in one episode.

    The first turn is ``build_messages``; each later turn appends the role's previous reply (as the
    assistant) and a ``followup_message``, so every prompt extends the previous one and a whole
    episode is one sequence whose model tokens can be trained on together.
    """

    def __init__(self) -> None:
        self.messages: Messages = []
        self.seen = 0

    def next_prompt(self, observation: PromptObservation, **budget: Any) -> Messages:
        if not self.messages:
            self.messages = build_messages(observation, **budget)
        else:
            self.messages.append(followup_message(observation, self.seen))
        self.seen = len(observation.conversation_history)
        return list(self.messages)

    def add_reply(self, text: str) -> None:
        self.messages.append({"role": "assistant", "content": text})
