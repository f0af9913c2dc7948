"""parse_action never raises, is bounded and tolerant of wrapping, strict on the contract;
format_action round-trips."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replicalab.models import (
    InvalidAction,
    LabManagerAction,
    LabManagerActionType,
    ScientistAction,
    ScientistActionType,
)
from replicalab.parsing import (
    MAX_PARSE_CHARS,
    MAX_RAW_TEXT_CHARS,
    format_action,
    parse_action,
)
from replicalab.seats import ROLES

RESULT_TYPES = (ScientistAction, LabManagerAction, InvalidAction)
FAST = settings(max_examples=200, deadline=None)

# ---------------------------------------------------------------- strategies for valid actions

words = st.text(min_size=1, max_size=20).map(str.strip).filter(bool)
word_lists = st.lists(words, max_size=4)
sizes = st.integers(min_value=1, max_value=10_000)
days = st.integers(min_value=0, max_value=365)


@st.composite
def scientist_actions(draw: Any) -> ScientistAction:
    kind = draw(st.sampled_from(list(ScientistActionType)))
    if kind in (ScientistActionType.PROPOSE_PROTOCOL, ScientistActionType.REVISE_PROTOCOL):
        return ScientistAction(
            action_type=kind, sample_size=draw(sizes), controls=draw(word_lists), technique=draw(words),
            duration_days=draw(days), required_equipment=draw(word_lists),
            required_reagents=draw(word_lists), rationale=draw(words),
        )
    if kind is ScientistActionType.REQUEST_INFO:
        return ScientistAction(
            action_type=kind, questions=draw(st.lists(words, min_size=1, max_size=3)),
            rationale=draw(st.one_of(st.just(""), words)),
        )
    return ScientistAction(action_type=kind)


@st.composite
def lab_manager_actions(draw: Any) -> LabManagerAction:
    flags = draw(st.tuples(*[st.booleans()] * 5))
    feasible = all(flags)
    names = ("budget_ok", "equipment_ok", "reagents_ok", "schedule_ok", "staff_ok")
    base: dict[str, Any] = dict(zip(names, flags), feasible=feasible, explanation=draw(words))
    if feasible:
        kind = draw(st.sampled_from([LabManagerActionType.ACCEPT, LabManagerActionType.REPORT_FEASIBILITY]))
        return LabManagerAction(action_type=kind, **base)
    kind = draw(st.sampled_from([t for t in LabManagerActionType if t is not LabManagerActionType.ACCEPT]))
    if kind is not LabManagerActionType.SUGGEST_ALTERNATIVE:
        return LabManagerAction(action_type=kind, **base)
    suggestion = dict(
        suggested_technique=draw(st.one_of(st.just(""), words)),
        suggested_sample_size=draw(st.integers(min_value=0, max_value=500)),
        suggested_controls=draw(word_lists),
        suggested_equipment=draw(word_lists),
        suggested_reagents=draw(word_lists),
        suggested_duration_days=draw(days),
    )
    if not any(suggestion.values()):
        suggestion["suggested_sample_size"] = 1
    return LabManagerAction(action_type=kind, **base, **suggestion)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
action_keys = st.sampled_from(
    [*ScientistAction.model_fields, *LabManagerAction.model_fields, "extra", "action"]
)
action_type_values = st.sampled_from(
    [t.value for t in ScientistActionType] + [t.value for t in LabManagerActionType] + ["nope", 3]
)
jsonish_dicts = st.dictionaries(action_keys, json_values, max_size=8).flatmap(
    lambda d: st.fixed_dictionaries({"action_type": action_type_values}).map(lambda a: {**a, **d})
) | st.dictionaries(action_keys, json_values, max_size=8)


def _check(result: Any, role: str) -> None:
    assert isinstance(result, RESULT_TYPES)
    if isinstance(result, InvalidAction):
        assert result.role == role
        assert result.error and "\n" not in result.error
        assert not result.error.startswith("internal parse error"), result.error
        assert len(result.raw_text) <= MAX_RAW_TEXT_CHARS
    else:
        assert isinstance(result, ScientistAction if role == "scientist" else LabManagerAction)


# ---------------------------------------------------------------- never raises, bounded


@FAST
@given(text=st.text(), role=st.sampled_from(ROLES))
def test_arbitrary_text_never_raises(text: str, role: str) -> None:
    _check(parse_action(text, role), role)  # type: ignore[arg-type]


@FAST
@given(
    obj=jsonish_dicts, prefix=st.text(max_size=30), suffix=st.text(max_size=30),
    fence=st.booleans(), role=st.sampled_from(ROLES),
)
def test_jsonish_dicts_never_raise(obj: dict, prefix: str, suffix: str, fence: bool, role: str) -> None:
    body = json.dumps(obj)
    text = f"{prefix}\n```json\n{body}\n```\n{suffix}" if fence else f"{prefix}{body}{suffix}"
    _check(parse_action(text, role), role)  # type: ignore[arg-type]


@FAST
@given(inner=st.text(), lang=st.sampled_from(["", "json", "JSON", "python"]), role=st.sampled_from(ROLES))
def test_fenced_text_never_raises(inner: str, lang: str, role: str) -> None:
    _check(parse_action(f"```{lang}\n{inner}\n```", role), role)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [None, 5, 3.5, b'{"action_type":"accept"}', ["x"], {"action_type": "accept"}, object()])
def test_non_string_input_is_invalid(value: Any) -> None:
    result = parse_action(value, "scientist")
    assert isinstance(result, InvalidAction) and "str" in result.error


@pytest.mark.parametrize(
    "text",
    [
        "{" * 100_000,
        "[" * 100_000,
        '{"a":' * 20_000,
        '{"a":"' + "\\" * 50_000,
        '{"' + "x" * 200_000,
        "}" * 50_000 + "{",
        '{"a{' * 5_000,
        "{x} " * 5_000,
        "\ud800" * 10_000 + '{"action_type": 1}',
    ],
)
def test_adversarial_inputs_are_fast_and_bounded(text: str) -> None:
    started = time.perf_counter()
    for role in ROLES:
        _check(parse_action(text, role), role)
    assert time.perf_counter() - started < 1.0


def test_input_is_truncated_before_parsing() -> None:
    valid = '{"action_type":"accept"}'
    assert isinstance(parse_action("x" * MAX_PARSE_CHARS + valid, "scientist"), InvalidAction)
    assert parse_action(valid + "x" * 100_000, "scientist") == ScientistAction(action_type="accept")
    result = parse_action("no json here " * 10_000, "scientist")
    assert isinstance(result, InvalidAction) and len(result.raw_text) == MAX_RAW_TEXT_CHARS


# ---------------------------------------------------------------- tolerant of wrapping


ACCEPT = ScientistAction(action_type=ScientistActionType.ACCEPT)


@pytest.mark.parametrize(
    "text",
    [
        '{"action_type": "accept"}',
        '```json\n{"action_type": "accept"}\n```',
        'Sure, here it is:\n```\n{"action_type": "accept"}\n```\nGood luck!',
        'I will accept. {"action_type": "accept"} That is all.',
        '{not json} then {"action_type": "accept"}',
        '{"action_type": "accept"} {"action_type": "request_info", "questions": ["q"]}',
        '  \n{"action_type": "accept", "questions": []}\n',
    ],
)
def test_wrapping_is_tolerated(text: str) -> None:
    assert parse_action(text, "scientist") == ACCEPT


def test_braces_inside_strings_are_respected() -> None:
    text = 'x {"action_type": "request_info", "questions": ["is {this} \\"ok\\"?"]} y'
    result = parse_action(text, "scientist")
    assert isinstance(result, ScientistAction) and result.questions == ['is {this} "ok"?']


# ---------------------------------------------------------------- strict on the contract


@pytest.mark.parametrize(
    ("text", "role", "needle"),
    [
        ("hello there", "scientist", "no JSON object found"),
        ("[1, 2]", "scientist", "JSON array"),
        ('[{"action_type": "accept"}]', "scientist", "JSON array"),
        ("42", "lab_manager", "JSON number"),
        ('{"action_type": "accept",}', "scientist", "JSON decode error"),
        ('{"action_type": "accept"', "scientist", "not closed"),
        ('{"action_type": "accept", "mood": "happy"}', "scientist", "mood: unknown field"),
        ('{"sample_size": 3}', "scientist", "action_type: missing"),
        ('{"action_type": "dance"}', "scientist", "'dance' is not one of"),
        ('{"action_type": "report_feasibility"}', "scientist", "belongs to the lab manager"),
        ('{"action_type": "propose_protocol"}', "lab_manager", "belongs to the scientist"),
        ('{"action_type": "propose_protocol", "sample_size": "6", "technique": "t", "rationale": "r"}',
         "scientist", "invalid scientist action: sample_size"),
        ('{"action_type": "propose_protocol", "sample_size": 6.0, "technique": "t", "rationale": "r"}',
         "scientist", "sample_size"),
        ('{"action_type": "propose_protocol", "sample_size": 0, "technique": "t", "rationale": "r"}',
         "scientist", "needs sample_size of at least 1"),
        ('{"action_type": "request_info", "questions": ["q"], "sample_size": 2}',
         "scientist", "must not carry protocol fields"),
        ('{"action_type": "request_info", "questions": "q"}', "scientist", "questions"),
        ('{"action_type": "accept", "feasible": 1, "budget_ok": true, "equipment_ok": true, "reagents_ok": true,'
         ' "schedule_ok": true, "staff_ok": true, "explanation": "ok"}', "lab_manager", "feasible"),
        ('{"action_type": "accept", "feasible": true, "budget_ok": false, "equipment_ok": true, "reagents_ok": true,'
         ' "schedule_ok": true, "staff_ok": true, "explanation": "ok"}', "lab_manager", "feasible must equal"),
        ('{"action_type": "reject", "feasible": false, "budget_ok": false, "equipment_ok": true, "reagents_ok": true,'
         ' "schedule_ok": true, "staff_ok": true, "explanation": "no", "suggested_sample_size": 2}',
         "lab_manager", "only allowed on suggest_alternative"),
    ],
)
def test_contract_violations_are_explained(text: str, role: str, needle: str) -> None:
    result = parse_action(text, role)  # type: ignore[arg-type]
    assert isinstance(result, InvalidAction), result
    assert needle in result.error, result.error
    assert result.raw_text == text and result.role == role


def test_unknown_role_is_a_caller_bug() -> None:
    with pytest.raises(ValueError):
        parse_action("{}", "judge")  # type: ignore[arg-type]


# ---------------------------------------------------------------- format_action round-trips


@FAST
@given(action=scientist_actions())
def test_scientist_round_trip(action: ScientistAction) -> None:
    text = format_action(action)
    assert "\n" not in text
    # The decision, then the rationale that names the revision, then what the revision holds.
    written = list(json.loads(text))
    assert written[0] == "action_type"
    assert "rationale" not in written or written[1] == "rationale"
    assert parse_action(text, "scientist") == action
    assert parse_action(f"Here you go:\n```json\n{text}\n```", "scientist") == action


@FAST
@given(action=lab_manager_actions())
def test_lab_manager_round_trip(action: LabManagerAction) -> None:
    text = format_action(action)
    written = list(json.loads(text))
    # Each dimension's check, then the verdict, then the decision, its suggestions, and last the words.
    flags = ["budget_ok", "equipment_ok", "reagents_ok", "schedule_ok", "staff_ok"]
    assert written[:7] == [*flags, "feasible", "action_type"]
    assert all(name.startswith("suggested_") for name in written[7:-1])
    assert written[-1] == "explanation"
    assert parse_action(text, "lab_manager") == action


def test_format_omits_defaults() -> None:
    assert format_action(ACCEPT) == '{"action_type":"accept"}'
    ask = ScientistAction(action_type=ScientistActionType.REQUEST_INFO, questions=["budget?"])
    assert json.loads(format_action(ask)) == {"action_type": "request_info", "questions": ["budget?"]}
