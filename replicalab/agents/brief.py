"""Read the published protocol out of the paper brief (the Scientist's only source of it)."""

from __future__ import annotations

import json

from replicalab.models import ScientistObservation
from replicalab.render import suggestion_in
from replicalab.scenario_records import CROSS_CHECK_MARKER, PUBLISHED_MARKER

PROTOCOL_FIELDS = ("sample_size", "controls", "technique", "duration_days", "required_equipment", "required_reagents")


def _stated(text: str, marker: str, fields: tuple[str, ...], end_marker: str = "") -> dict:
    """The JSON object stated after ``marker`` (up to ``end_marker`` and its trailing period, or to the
    end), if it has exactly ``fields``; else empty."""
    start = text.find(marker)
    end = text.find(end_marker, start) if end_marker else len(text)
    if start < 0 or end < 0:
        return {}
    body = text[start + len(marker):end].strip()
    try:
        stated = json.loads(body.removesuffix(".") if end_marker else body)
    except ValueError:
        return {}
    return stated if isinstance(stated, dict) and set(stated) == set(fields) else {}


def published_protocol(obs: ScientistObservation) -> dict:
    """The brief's protocol as ScientistAction fields; empty when the brief states none.

    The brief ends with ``Published protocol: {json}``, the fields in ScientistAction order."""
    return _stated(obs.paper_method, PUBLISHED_MARKER, PROTOCOL_FIELDS)


def cross_check_method(obs: ScientistObservation) -> dict:
    """The paper's protocol run with the orthogonal method it cross-checked with, as ScientistAction
    fields (a complete protocol, proposable as written); empty if the brief states none.

    The brief states it as ``Cross-checked with: {json}.`` before the published protocol."""
    return _stated(obs.paper_method, CROSS_CHECK_MARKER, PROTOCOL_FIELDS, end_marker=PUBLISHED_MARKER)


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
