"""How actions appear in the dialogue: the one text form both seats (and transcripts) see."""

from __future__ import annotations

from replicalab.models import (
    LabManagerAction,
    Protocol,
    ScientistAction,
    ScientistActionType,
)
from replicalab.trusted import trusted

QUESTION_PREFIX = "- "
SUGGESTED_MARKER = " Suggested: "


#: Suggestion fields of a LabManagerAction (``suggested_<name>``), in the order they are shown.
SUGGESTION_FIELDS = ("technique", "sample_size", "controls", "duration_days", "equipment", "reagents")
#: The protocol field (a ScientistAction's key) each suggestion field replaces, where the names differ.
_PROTOCOL_KEYS = {"equipment": "required_equipment", "reagents": "required_reagents"}
_LIST_FIELDS = ("controls", "equipment", "reagents")
_NUMBER_FIELDS = ("sample_size", "duration_days")
_SUGGESTION_ATTRIBUTES = tuple((name, f"suggested_{name}") for name in SUGGESTION_FIELDS)


def _plan_text(p: Protocol | ScientistAction) -> str:
    return (
        f"technique={p.technique}; sample_size={p.sample_size}; controls={', '.join(p.controls) or 'none'}; "
        f"duration_days={p.duration_days}; equipment={', '.join(p.required_equipment) or 'none'}; "
        f"reagents={', '.join(p.required_reagents) or 'none'}"
    )


def render_protocol(p: Protocol) -> str:
    return _plan_text(p)


def render_scientist(action: ScientistAction) -> str:
    kind = action.action_type
    if kind is ScientistActionType.REQUEST_INFO:
        lines = "\n".join(QUESTION_PREFIX + q for q in action.questions)
        return f"Questions:\n{lines}" + (f"\n({action.rationale})" if action.rationale else "")
    if kind is ScientistActionType.ACCEPT:
        return "I accept." + (f" {action.rationale}" if action.rationale else "")
    verb = "Proposal" if kind is ScientistActionType.PROPOSE_PROTOCOL else "Revision"
    return f"{verb}: {_plan_text(action)}. Rationale: {action.rationale}"


def render_lab_manager(action: LabManagerAction) -> str:
    a = action
    text = (f"{a.explanation} [budget {'ok' if a.budget_ok else 'no'}, equipment {'ok' if a.equipment_ok else 'no'}, "
            f"reagents {'ok' if a.reagents_ok else 'no'}, schedule {'ok' if a.schedule_ok else 'no'}, "
            f"staff {'ok' if a.staff_ok else 'no'}]")
    if a.has_suggestion():
        values = [(name, getattr(a, attribute)) for name, attribute in _SUGGESTION_ATTRIBUTES]
        text += SUGGESTED_MARKER + "; ".join(
            f"{name}={', '.join(v) if isinstance(v, list) else v}" for name, v in values if v)
    return text


def questions_in(message: str) -> list[str]:
    """The questions of a rendered request_info message."""
    return [line[len(QUESTION_PREFIX):] for line in message.splitlines() if line.startswith(QUESTION_PREFIX)]


def apply_suggestion(protocol: Protocol, s: LabManagerAction) -> Protocol:
    """The protocol with every non-empty suggested field of ``s`` put in place."""
    return trusted(
        Protocol, sample_size=s.suggested_sample_size or protocol.sample_size,
        controls=list(s.suggested_controls or protocol.controls),
        technique=s.suggested_technique or protocol.technique,
        duration_days=s.suggested_duration_days or protocol.duration_days,
        required_equipment=list(s.suggested_equipment or protocol.required_equipment),
        required_reagents=list(s.suggested_reagents or protocol.required_reagents),
        rationale=protocol.rationale,
    )


def suggestion_in(message: str) -> dict[str, str]:
    """The suggested fields of a rendered Lab Manager message, as text (``{"technique": "mtt_assay"}``);
    empty when it suggests nothing."""
    _, found, tail = message.rpartition(SUGGESTED_MARKER)
    if not found:
        return {}
    out: dict[str, str] = {}
    for part in tail.split("\n", 1)[0].split("; "):  # a suggestion ends its line
        name, eq, value = part.partition("=")
        if eq and name in SUGGESTION_FIELDS:
            out[name] = value
    return out


def suggested_fields(suggested: dict[str, str]) -> dict[str, object]:
    """A suggestion as ``suggestion_in`` reads it, typed under the protocol keys a ScientistAction writes
    (``{"duration_days": "5", "equipment": "a, b"}`` -> ``{"duration_days": 5, "required_equipment": ["a", "b"]}``),
    in ``SUGGESTION_FIELDS`` order; a number that is not one is left out."""
    out: dict[str, object] = {}
    for name in SUGGESTION_FIELDS:
        value = suggested.get(name)
        if value is None or (name in _NUMBER_FIELDS and not value.isdigit()):
            continue
        typed = [v for v in value.split(", ") if v] if name in _LIST_FIELDS else \
            int(value) if name in _NUMBER_FIELDS else value
        out[_PROTOCOL_KEYS.get(name, name)] = typed
    return out
