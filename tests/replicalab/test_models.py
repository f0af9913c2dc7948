"""The seed contracts: every validation rule and its plain-words message."""

import pytest
from pydantic import ValidationError

from replicalab.models import (
    ConversationEntry,
    EpisodeLog,
    LabManagerAction,
    Protocol,
    RewardBreakdown,
    ScientistAction,
    StepInfo,
    _normalize_string_list,
)

PROPOSAL = dict(action_type="propose_protocol", sample_size=3, technique="mtt_assay", rationale="why")
FLAGS = dict(budget_ok=True, equipment_ok=True, reagents_ok=True, schedule_ok=True, staff_ok=True)


def test_normalizer_strips_and_rejects_empty():
    assert _normalize_string_list([" a ", "b"]) == ["a", "b"]
    with pytest.raises(ValueError, match="non-empty"):
        _normalize_string_list(["a", "  "])
    with pytest.raises(ValueError, match="list of strings"):
        _normalize_string_list("abc")


@pytest.mark.parametrize("change, message", [
    (dict(sample_size=0), "sample_size of at least 1"),
    (dict(technique="  "), "needs a technique"),
    (dict(rationale=""), "needs a rationale"),
    (dict(questions=["why?"]), "must not carry questions"),
])
def test_proposal_rules(change, message):
    with pytest.raises(ValidationError, match=message):
        ScientistAction(**{**PROPOSAL, **change})


def test_request_info_and_accept_rules():
    with pytest.raises(ValidationError, match="at least one question"):
        ScientistAction(action_type="request_info")
    with pytest.raises(ValidationError, match="must not carry protocol fields"):
        ScientistAction(action_type="request_info", questions=["q"], sample_size=3)
    with pytest.raises(ValidationError, match="must not carry protocol fields"):
        ScientistAction(action_type="accept", required_equipment=["x"])
    with pytest.raises(ValidationError, match="accept must not carry questions"):
        ScientistAction(action_type="accept", questions=["q"])
    ok = ScientistAction(action_type="revise_protocol", sample_size=2, technique=" t ", rationale=" r ",
                         controls=[" c "])
    assert (ok.technique, ok.rationale, ok.controls) == ("t", "r", ["c"])


def test_scientist_action_is_frozen_and_strict():
    a = ScientistAction(**PROPOSAL)
    with pytest.raises(ValidationError):
        a.sample_size = 5
    with pytest.raises(ValidationError, match="Extra inputs"):
        ScientistAction(**PROPOSAL, budget=3)
    with pytest.raises(ValidationError):
        ScientistAction(**{**PROPOSAL, "sample_size": -1})


@pytest.mark.parametrize("fields, message", [
    (dict(action_type="accept", feasible=True, **{**FLAGS, "staff_ok": False}), "feasible must equal"),
    (dict(action_type="accept", feasible=False, **{**FLAGS, "staff_ok": False}), "accept requires feasible=true"),
    (dict(action_type="reject", feasible=True, **FLAGS), "reject requires feasible=false"),
    (dict(action_type="suggest_alternative", feasible=False, **{**FLAGS, "budget_ok": False}),
     "at least one suggested_"),
    (dict(action_type="suggest_alternative", feasible=True, suggested_sample_size=3, **FLAGS),
     "suggest_alternative requires feasible=false"),
    (dict(action_type="report_feasibility", feasible=True, suggested_technique="x", **FLAGS),
     "only allowed on suggest_alternative"),
    (dict(action_type="accept", feasible=True, explanation="  ", **FLAGS), "explanation must be a non-empty"),
])
def test_lab_manager_rules(fields, message):
    fields.setdefault("explanation", "because")
    with pytest.raises(ValidationError, match=message):
        LabManagerAction(**fields)


def test_lab_manager_valid_suggestion():
    a = LabManagerAction(action_type="suggest_alternative", feasible=False, **{**FLAGS, "budget_ok": False},
                         suggested_sample_size=4, suggested_controls=[" c "], explanation=" cheaper ")
    assert a.suggested_controls == ["c"] and a.explanation == "cheaper" and a.has_suggestion()


def test_observation_and_record_models():
    with pytest.raises(ValidationError, match="non-empty"):
        ConversationEntry(role="scientist", message=" ", round_number=0)
    with pytest.raises(ValidationError, match="null or a non-empty"):
        ConversationEntry(role="system", message="m", round_number=0, action_type=" ")
    with pytest.raises(ValidationError):
        ConversationEntry(role="judge", message="m", round_number=0)
    with pytest.raises(ValidationError, match="technique must be a non-empty"):
        Protocol(sample_size=1, technique=" ", duration_days=1, rationale="r")
    with pytest.raises(ValidationError):
        RewardBreakdown(rigor=1.5)
    assert StepInfo(custom=1).model_extra == {"custom": 1}
    log = EpisodeLog()
    assert (log.difficulty, log.total_reward, log.transcript) == ("easy", 0.0, [])
