"""Read the published protocol out of the paper brief (the Scientist's only source of it)."""

from __future__ import annotations

import json

from replicalab.models import ScientistAction, ScientistActionType, ScientistObservation
from replicalab.render import suggestion_in
from replicalab.scenario_records import CROSS_CHECK_MARKER, PUBLISHED_MARKER

#: The rationale of a revision to the brief's cross-check protocol.
CROSS_CHECK_RATIONALE = "Use the paper's cross-check method."
PROTOCOL_FIELDS = ("sample_size", "controls", "technique", "duration_days", "required_equipment", "required_reagents")


def _statement(text: str, marker: str, end_marker: str = "") -> str:
    """The text stated after ``marker`` (up to ``end_marker`` and the period before it, or to the end),
    verbatim; empty when ``marker`` (or ``end_marker``) is not in ``text``."""
    start = text.find(marker)
    end = text.find(end_marker, start) if end_marker else len(text)
    if start < 0 or end < 0:
        return ""
    body = text[start + len(marker):end].strip()
    return body.removesuffix(".") if end_marker else body


def _stated(text: str, marker: str, fields: tuple[str, ...], end_marker: str = "") -> dict:
    """The JSON object stated after ``marker`` (see ``_statement``), if it has exactly ``fields``; else empty."""
    body = _statement(text, marker, end_marker)
    if not body:
        return {}
    try:
        stated = json.loads(body)
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


def cross_check_revision(obs: ScientistObservation) -> ScientistAction | None:
    """The revision to the brief's cross-check protocol as written (``cross_check_method`` with
    ``CROSS_CHECK_RATIONALE``); None when the brief states none."""
    method = cross_check_method(obs)
    return ScientistAction(action_type=ScientistActionType.REVISE_PROTOCOL, rationale=CROSS_CHECK_RATIONALE,
                           **method) if method else None


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
