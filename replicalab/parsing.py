"""Model text -> action, and action -> the canonical text a model should emit.

``parse_action`` never raises: bad model output is data, so every failure comes back as an
``InvalidAction`` whose ``error`` says in plain words what was wrong.  Parsing is tolerant about the
wrapping (prose, markdown fences) and strict about the contract (the first JSON object found must
validate, in pydantic strict mode, against the role's action model; unknown keys fail).  Work is
bounded: input is cut to ``MAX_PARSE_CHARS``, at most ``MAX_CANDIDATES`` objects are tried and
nesting deeper than ``MAX_NESTING`` is refused before ``json.loads`` sees it.
"""

from __future__ import annotations

import json
import re
from enum import Enum
from typing import Any, Union

from pydantic import BaseModel, ValidationError

from replicalab.models import (
    InvalidAction,
    LabManagerAction,
    LabManagerActionType,
    ScientistAction,
    ScientistActionType,
)
from replicalab.seats import AgentRole

MAX_PARSE_CHARS = 8192
MAX_RAW_TEXT_CHARS = 2000
MAX_NESTING = 20
MAX_CANDIDATES = 32
MAX_ERROR_CHARS = 300
MAX_REPORTED_ERRORS = 3
#: Fields written before the rest in ``format_action`` (and listed first in the prompts).
WRITTEN_FIRST: dict[type[BaseModel], tuple[str, ...]] = {
    LabManagerAction: ("budget_ok", "equipment_ok", "reagents_ok", "schedule_ok", "staff_ok", "feasible",
                       "action_type"),
    ScientistAction: ("action_type", "rationale"),
}
#: Fields written after the rest (and listed last in the prompts).
WRITTEN_LAST: dict[type[BaseModel], tuple[str, ...]] = {LabManagerAction: ("explanation",)}

Action = Union[ScientistAction, LabManagerAction]
ParseResult = Union[ScientistAction, LabManagerAction, InvalidAction]

#: The action model of each role.
ACTION_MODELS: dict[str, type[BaseModel]] = {"scientist": ScientistAction, "lab_manager": LabManagerAction}
_ACTION_TYPES: dict[str, type[Enum]] = {
    "scientist": ScientistActionType,
    "lab_manager": LabManagerActionType,
}
_OTHER_ROLE = {"scientist": "lab_manager", "lab_manager": "scientist"}
_CLOSERS = {"{": "}", "[": "]"}
_OUTSIDE_STRING = re.compile(r'[{}\[\]"]')
_INSIDE_STRING = re.compile(r'["\\]')
_FENCE = re.compile(r"^```[A-Za-z0-9_-]*\s*(.*?)\s*```$", re.DOTALL)
_JSON_KIND = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number"}


def _clean(text: str, limit: int) -> str:
    """Cut to ``limit`` characters and replace lone surrogates so the text is always storable."""
    return text[:limit].encode("utf-8", errors="replace").decode("utf-8")


def _scan_object(text: str, start: int) -> tuple[int, str]:
    """Scan a bracket-balanced value that opens at ``text[start]`` (``{`` or ``[``).

    Returns ``(end, "")`` with ``text[start:end]`` the balanced span, or ``(-1, reason)``.
    Strings (with escapes) are skipped, so braces inside them do not count.
    """
    stack: list[str] = []
    pos = start
    while True:
        match = _OUTSIDE_STRING.search(text, pos)
        if match is None:
            return -1, "unbalanced braces (the JSON object is not closed)"
        char, pos = match.group(), match.end()
        if char == '"':
            while True:
                inner = _INSIDE_STRING.search(text, pos)
                if inner is None:
                    return -1, "unterminated string inside the JSON object"
                pos = inner.end() + (1 if inner.group() == "\\" else 0)
                if inner.group() == '"':
                    break
        elif char in _CLOSERS:
            stack.append(_CLOSERS[char])
            if len(stack) > MAX_NESTING:
                return -1, f"JSON nested deeper than {MAX_NESTING} levels"
        elif stack.pop() != char:
            return -1, f"mismatched bracket {char!r}"
        if not stack:
            return pos, ""


def _find_object(text: str) -> tuple[dict[str, Any] | None, str]:
    """The first balanced ``{...}`` span that decodes to a JSON object, or ``(None, why not)``."""
    first_problem = ""
    start = text.find("{")
    tried = 0
    while start != -1 and tried < MAX_CANDIDATES:
        tried += 1
        end, problem = _scan_object(text, start)
        if end != -1:
            try:
                value = json.loads(text[start:end])
            except (ValueError, RecursionError) as exc:
                problem = f"JSON decode error: {exc}"
            else:
                if isinstance(value, dict):
                    return value, ""
        first_problem = first_problem or problem
        start = text.find("{", start + 1)
    return None, first_problem or "no JSON object found"


def _non_object_json(text: str) -> str:
    """If the whole (unfenced) text is JSON but not an object, say what it is; else ``""``."""
    body = text.strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1)
    if not body or body[0] == "{":
        return ""
    if body[0] == "[" and _scan_object(body, 0)[0] != len(body):
        return ""  # not one balanced array within the nesting bound
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return ""
    return f"expected a JSON object, got a JSON {_JSON_KIND.get(type(value), 'null')}"


def _condense(exc: ValidationError) -> str:
    """Pydantic errors as one line: ``field.path: message; ...``."""
    parts: list[str] = []
    for err in exc.errors()[:MAX_REPORTED_ERRORS]:
        msg = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
        if err.get("type") == "extra_forbidden":
            msg = "unknown field (not part of the action format)"
        loc = ".".join(str(part) for part in err.get("loc", ()))
        parts.append(f"{loc}: {msg}" if loc else msg)
    extra = exc.error_count() - MAX_REPORTED_ERRORS
    if extra > 0:
        parts.append(f"and {extra} more")
    return "; ".join(parts)


def _validate(obj: dict[str, Any], role: str) -> Action | str:
    """Validate a decoded object against ``role``'s model; return the action or an error line."""
    label = role.replace("_", " ")
    enum_type = _ACTION_TYPES[role]
    allowed = [member.value for member in enum_type]
    kind = obj.get("action_type")
    if "action_type" not in obj:
        return f"invalid {label} action: action_type: missing (one of {', '.join(allowed)})"
    if not isinstance(kind, str) or kind not in allowed:
        other = _OTHER_ROLE[role]
        if isinstance(kind, str) and kind in [m.value for m in _ACTION_TYPES[other]]:
            return (
                f"action_type {kind!r} belongs to the {other.replace('_', ' ')}, "
                f"not the {label}; use one of {', '.join(allowed)}"
            )
        return f"invalid {label} action: action_type: {kind!r} is not one of {', '.join(allowed)}"
    data = dict(obj, action_type=enum_type(kind))
    try:
        return ACTION_MODELS[role].model_validate(data, strict=True)  # type: ignore[return-value]
    except ValidationError as exc:
        return f"invalid {label} action: {_condense(exc)}"


def parse_action(text: Any, role: AgentRole) -> ParseResult:
    """Turn model output into the role's action, or an ``InvalidAction`` saying why not.

    Accepts a JSON object surrounded by prose and/or ```json fences; the first balanced object that
    decodes is used and must validate (strict types, no extra keys) against ``ScientistAction`` or
    ``LabManagerAction``.  Never raises for any ``text``; only an unknown ``role`` (a caller bug)
    raises ``ValueError``.
    """
    if not isinstance(role, str) or role not in ACTION_MODELS:
        raise ValueError(f"role must be 'scientist' or 'lab_manager', got {role!r}")
    if not isinstance(text, str):
        return InvalidAction(role=role, error=f"expected model text (str), got {type(text).__name__}")
    try:
        text = str.__getitem__(text, slice(0, MAX_PARSE_CHARS))
        raw = _clean(text, MAX_RAW_TEXT_CHARS)
        obj: dict[str, Any] | None = None
        problem = _non_object_json(text)  # a bare array or scalar is refused, not searched
        if not problem:
            obj, problem = _find_object(text)
        if obj is None:
            error = problem
        else:
            result = _validate(obj, role)
            if not isinstance(result, str):
                return result
            error = result
    except Exception as exc:  # noqa: BLE001 -- last-resort guard: this function must never raise
        raw = ""
        error = f"internal parse error ({type(exc).__name__}): {exc}"
    return InvalidAction(role=role, error=_clean(" ".join(error.split()), MAX_ERROR_CHARS), raw_text=raw)


def field_order(model: type[BaseModel]) -> list[str]:
    """The order actions of ``model`` are written in: the model's field order, except that the
    fields in ``WRITTEN_FIRST`` lead and those in ``WRITTEN_LAST`` close.  The Lab Manager writes
    each dimension's check, then the verdict they imply (``feasible``), then its decision, then the
    suggestion fields the decision allows and last the explanation that puts all of it in words; the
    Scientist writes its decision, then the rationale that says which revision it makes, then the
    numbers and names that revision holds: a model writing the JSON left to right has what each field
    depends on just before it, and one small decision per field."""
    first = [name for name in WRITTEN_FIRST.get(model, ()) if name in model.model_fields]
    last = [name for name in WRITTEN_LAST.get(model, ()) if name in model.model_fields]
    return first + [name for name in model.model_fields if name not in first + last] + last


def format_action(action: Action) -> str:
    """Canonical single-line JSON for ``action`` in ``field_order``, defaults omitted.

    ``action_type`` and the model's required fields (for the Lab Manager: the flags and the
    explanation) are always written.  ``parse_action(format_action(a), role) == a``.
    """
    fields = type(action).model_fields
    dumped = action.model_dump(mode="json")
    out: dict[str, Any] = {}
    for name in field_order(type(action)):
        info, value = fields[name], dumped[name]
        if info.is_required() or value != info.get_default(call_default_factory=True):
            out[name] = value
    return json.dumps(out, ensure_ascii=False, separators=(",", ":"))
