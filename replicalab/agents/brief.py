"""Read the published protocol out of the paper brief (the Scientist's only source of it)."""

from __future__ import annotations

import json

from replicalab.models import ScientistObservation
from replicalab.render import suggestion_in
from replicalab.scenario import CROSS_CHECK_MARKER, PUBLISHED_MARKER

MARKER = PUBLISHED_MARKER
PROTOCOL_FIELDS = ("sample_size", "controls", "technique", "duration_days", "required_equipment", "required_reagents")
CROSS_CHECK_FIELDS = ("technique", "required_equipment", "required_reagents")


def published_protocol(obs: ScientistObservation) -> dict:
    """The brief's protocol as ScientistAction fields; empty when the brief states none.

    The brief ends with ``Published protocol: {json}``, the fields in ScientistAction order."""
    text = obs.paper_method
    start = text.find(MARKER)
    if start < 0:
        return {}
    try:
        fields = json.loads(text[start + len(MARKER):])
    except ValueError:
        return {}
    if not isinstance(fields, dict) or set(fields) != set(PROTOCOL_FIELDS):
        return {}
    return fields


def cross_check_method(obs: ScientistObservation) -> dict:
    """The orthogonal method the paper cross-checked with (technique and its items); empty if none.

    The brief states it as ``Cross-checked with: {json}.`` before the published protocol."""
    text = obs.paper_method
    start, end = text.find(CROSS_CHECK_MARKER), text.find(MARKER)
    if start < 0 or end < start:
        return {}
    body = text[start + len(CROSS_CHECK_MARKER):end].strip().removesuffix(".")
    try:
        fields = json.loads(body)
    except ValueError:
        return {}
    if not isinstance(fields, dict) or set(fields) != set(CROSS_CHECK_FIELDS):
        return {}
    return fields


def last_suggestion(obs: ScientistObservation) -> dict[str, str]:
    """The fields the Lab Manager's latest turn suggested (``render.suggestion_in``), if it is the latest entry."""
    history = obs.conversation_history
    if not history or history[-1].role != "lab_manager":
        return {}
    return suggestion_in(history[-1].message)


def last_lab_manager_action(obs: ScientistObservation) -> str | None:
    """The action type of the Lab Manager's latest turn, if its latest entry is one."""
    for entry in reversed(obs.conversation_history):
        if entry.role == "lab_manager":
            return entry.action_type
        if entry.role == "scientist":
            return None
    return None
