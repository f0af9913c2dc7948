"""Read the published protocol out of the paper brief (the Scientist's only source of it)."""

from __future__ import annotations

import json
import re

from replicalab.lab.answers import ALTERNATIVES_MARKER, ANSWERS_PREFIX
from replicalab.lab.feasibility import UNUSABLE_REASONS
from replicalab.models import ScientistObservation
from replicalab.dialogue import suggested_fields, suggestion_in
from replicalab.scenario_records import CROSS_CHECK_MARKER, PUBLISHED_MARKER, power_statement

#: An answer's unusable item and the stand-ins it offers (``item: status; available alternatives: a, b``).
_OFFERED = re.compile(r"([a-z0-9_]+): [^;|:]*" + re.escape(ALTERNATIVES_MARKER) + r"([a-z0-9_]+(?:, [a-z0-9_]+)*)")

#: The rationale of a revision to the brief's cross-check protocol.
CROSS_CHECK_RATIONALE = "Use the paper's cross-check method."
PROTOCOL_FIELDS = ("sample_size", "controls", "technique", "duration_days", "required_equipment", "required_reagents")
#: The keys of the cross-check statement (``duration_days`` only where the method changes it).
CROSS_CHECK_FIELDS = ("technique", "equipment", "reagents")


def _statement(text: str, marker: str, end_marker: str = "") -> str:
    """The text stated after ``marker`` (up to ``end_marker`` and the period before it, or to the end),
    verbatim; empty when ``marker`` (or ``end_marker``) is not in ``text``."""
    start = text.find(marker)
    end = text.find(end_marker, start) if end_marker else len(text)
    if start < 0 or end < 0:
        return ""
    body = text[start + len(marker):end].strip()
    return body.removesuffix(".") if end_marker else body


def _stated(text: str, marker: str, fields: tuple[str, ...], end_marker: str = "",
            optional: tuple[str, ...] = ("duration_days",)) -> dict:
    """The JSON object stated after ``marker`` (see ``_statement``), if it has exactly ``fields`` (and any of
    ``optional``); else empty."""
    body = _statement(text, marker, end_marker)
    if not body:
        return {}
    try:
        stated = json.loads(body)
    except ValueError:
        return {}
    if not isinstance(stated, dict) or not set(fields) <= set(stated) <= set(fields) | set(optional):
        return {}
    return stated


def published_protocol(obs: ScientistObservation) -> dict:
    """The brief's protocol as ScientistAction fields; empty when the brief states none.

    The brief ends with ``Published protocol: {json}``, the fields in ScientistAction order."""
    return _stated(obs.paper_method, PUBLISHED_MARKER, PROTOCOL_FIELDS)


def cross_check_method(obs: ScientistObservation) -> dict:
    """The paper's protocol run with the orthogonal method it cross-checked with, as ScientistAction
    fields; empty if the brief states none.

    The brief states the method as what it changes, ``Cross-checked with: {json}.`` before the published
    protocol: its ``technique``, per item kind the items it swaps ``out`` and ``in``, and ``duration_days`` where
    it differs.  The protocol is the published one with those changes applied (items swapped in go last)."""
    published = published_protocol(obs)
    change = _stated(obs.paper_method, CROSS_CHECK_MARKER, CROSS_CHECK_FIELDS, end_marker=PUBLISHED_MARKER)
    if not published or not change:
        return {}
    method = {**published, "technique": change["technique"]}
    method["duration_days"] = change.get("duration_days", published["duration_days"])
    for kind, field in (("equipment", "required_equipment"), ("reagents", "required_reagents")):
        swap = change[kind]
        method[field] = [i for i in published[field] if i not in swap["out"]] + list(swap["in"])
    return method


def last_suggestion(obs: ScientistObservation) -> dict[str, str]:
    """The fields the Lab Manager's latest turn suggested (``dialogue.suggestion_in``), if it is the latest entry."""
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


def minimum_sample_size(obs: ScientistObservation) -> int:
    """The smallest sample size the brief's power analysis allows (its key finding's last sentence); 0 if unstated."""
    return power_statement(obs.paper_key_finding)[1]


def lab_message(obs: ScientistObservation) -> str:
    """The Lab Manager's latest message, if it is the latest entry; else empty."""
    history = obs.conversation_history
    return history[-1].message if history and history[-1].role == "lab_manager" else ""


def unusable_items(message: str, items: list[str]) -> list[str]:
    """The ``items`` a Lab Manager's ``message`` names as known to the lab but unusable (booked, out of
    stock, not in the lab), in the order of ``items``."""
    return [i for i in items if any(reason.format(item=i) in message for reason in UNUSABLE_REASONS)]


def stand_ins(obs: ScientistObservation) -> dict[str, str]:
    """item -> the first usable stand-in the environment's latest answer offered for it (empty when the
    latest answer is not the dialogue's last system entry after the Scientist's question)."""
    for entry in reversed(obs.conversation_history):
        if entry.role == "system" and entry.message.startswith(ANSWERS_PREFIX):
            break
        if entry.role == "scientist":
            return {}
    else:
        return {}
    return {m.group(1): m.group(2).split(", ")[0] for m in _OFFERED.finditer(entry.message)}


def offered_stand_ins(obs: ScientistObservation) -> list[tuple[str, str]]:
    """(item, stand-in) for every stand-in any of the environment's answers in the dialogue offered, in order."""
    return [(m.group(1), alt) for entry in obs.conversation_history
            if entry.role == "system" and entry.message.startswith(ANSWERS_PREFIX)
            for m in _OFFERED.finditer(entry.message) for alt in m.group(2).split(", ")]


def suggested_plan(obs: ScientistObservation) -> dict:
    """The current protocol with the Lab Manager's latest suggestion applied, as ScientistAction protocol
    fields; empty when there is no current protocol or the latest entry suggests nothing."""
    plan, suggested = obs.current_protocol, last_suggestion(obs)
    if plan is None or not suggested:
        return {}
    fields = {name: getattr(plan, name) for name in PROTOCOL_FIELDS}
    fields.update(suggested_fields(suggested))
    return fields
