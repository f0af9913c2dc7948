"""The validation rules behind ``replicalab.models``: field normalisers and the actions' shape checks.

``replicalab.models`` attaches these to its records (and re-exports ``_normalize_string_list`` and
``_strip``); each record's docstring states its rules.  This module sits below ``models`` and imports
nothing from it, so the actions are typed loosely here and their kinds are compared by value.  Every
failure is a ``ValueError`` whose message says in plain words which rule was broken.
"""

from __future__ import annotations

from typing import Any

#: The Scientist action kinds that carry a protocol (``ScientistActionType`` values).
PROTOCOL_KINDS = ("propose_protocol", "revise_protocol")


def _normalize_string_list(value: Any) -> list[str]:
    """Strip every entry; reject entries that are not strings or are empty after stripping."""
    if value is None:
        return []
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise ValueError("must be a list of strings")
    out: list[str] = []
    for item in value:
        if not isinstance(item, str):
            raise ValueError(f"list entries must be strings, got {type(item).__name__}")
        item = item.strip()
        if not item:
            raise ValueError("list entries must be non-empty strings")
        out.append(item)
    return out


def _strip(value: Any) -> Any:
    return value.strip() if isinstance(value, str) else value


def message_non_empty(v: str) -> str:
    """A conversation entry's message: non-empty once stripped (kept as given)."""
    if not v.strip():
        raise ValueError("message must be a non-empty string")
    return v


def action_type_non_empty(v: str | None) -> str | None:
    """A conversation entry's action type: null or non-empty once stripped (kept as given)."""
    if v is not None and not v.strip():
        raise ValueError("action_type must be null or a non-empty string")
    return v


def text_non_empty(v: str, info: Any) -> str:
    """A required text field (already stripped): non-empty."""
    if not v:
        raise ValueError(f"{info.field_name} must be a non-empty string")
    return v


def check_scientist_action(a: Any) -> None:
    """The shape rules of a ``ScientistAction`` (see its docstring)."""
    kind = a.action_type.value
    if kind in PROTOCOL_KINDS:
        if a.sample_size < 1:
            raise ValueError(f"{kind} needs sample_size of at least 1")
        if not a.technique:
            raise ValueError(f"{kind} needs a technique")
        if not a.rationale:
            raise ValueError(f"{kind} needs a rationale")
        if a.questions:
            raise ValueError(f"{kind} must not carry questions; use request_info to ask")
    elif kind == "request_info":
        if not a.questions:
            raise ValueError("request_info needs at least one question")
        if a.has_protocol_payload():
            raise ValueError("request_info must not carry protocol fields")
    else:
        if a.questions:
            raise ValueError("accept must not carry questions")
        if a.has_protocol_payload():
            raise ValueError("accept must not carry protocol fields")


def check_lab_manager_action(a: Any) -> None:
    """The shape rules of a ``LabManagerAction`` (see its docstring)."""
    if not a.explanation:
        raise ValueError("explanation must be a non-empty string")
    flags = (a.budget_ok, a.equipment_ok, a.reagents_ok, a.schedule_ok, a.staff_ok)
    if a.feasible != all(flags):
        raise ValueError(
            "feasible must equal budget_ok and equipment_ok and reagents_ok and schedule_ok and staff_ok"
        )
    kind = a.action_type.value
    if kind == "accept" and not a.feasible:
        raise ValueError("accept requires feasible=true")
    if kind == "reject" and a.feasible:
        raise ValueError("reject requires feasible=false")
    if kind == "suggest_alternative":
        if a.feasible:
            raise ValueError("suggest_alternative requires feasible=false")
        if not a.has_suggestion():
            raise ValueError("suggest_alternative needs at least one suggested_* field")
    elif a.has_suggestion():
        raise ValueError(f"suggested_* fields are only allowed on suggest_alternative, not {kind}")
