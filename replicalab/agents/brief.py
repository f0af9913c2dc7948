"""Read the published protocol out of the paper brief (the Scientist's only source of it)."""

from __future__ import annotations

from replicalab.models import ScientistObservation

MARKER = "Published protocol:"


def published_protocol(obs: ScientistObservation) -> dict:
    """The brief's protocol as ScientistAction fields; empty when the brief states none."""
    text = obs.paper_method
    start = text.find(MARKER)
    if start < 0:
        return {}
    fields: dict[str, str] = {}
    for part in text[start + len(MARKER):].strip().rstrip(".").split("; "):
        key, _, value = part.partition("=")
        fields[key.strip()] = value.strip()
    split = lambda v: [x.strip() for x in v.split(",") if x.strip()]  # noqa: E731
    try:
        return dict(
            technique=fields["technique"], sample_size=int(fields["sample_size"]),
            controls=split(fields["controls"]), duration_days=int(fields["duration_days"]),
            required_equipment=split(fields["equipment"]), required_reagents=split(fields["reagents"]),
        )
    except (KeyError, ValueError):
        return {}


def last_lab_manager_action(obs: ScientistObservation) -> str | None:
    """The action type of the Lab Manager's latest turn, if its latest entry is one."""
    for entry in reversed(obs.conversation_history):
        if entry.role == "lab_manager":
            return entry.action_type
        if entry.role == "scientist":
            return None
    return None
