"""Read the published protocol out of the paper brief (the Scientist's only source of it)."""

from __future__ import annotations

import json

from replicalab.models import ScientistObservation

MARKER = "Published protocol:"


PROTOCOL_FIELDS = ("sample_size", "controls", "technique", "duration_days", "required_equipment", "required_reagents")


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


def last_lab_manager_action(obs: ScientistObservation) -> str | None:
    """The action type of the Lab Manager's latest turn, if its latest entry is one."""
    for entry in reversed(obs.conversation_history):
        if entry.role == "lab_manager":
            return entry.action_type
        if entry.role == "scientist":
            return None
    return None
