"""build_messages: contract-derived system text, visible facts only, oldest-first trimming."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replicalab.models import (
    ConversationEntry,
    InvalidAction,
    LabManagerAction,
    LabManagerActionType,
    LabManagerObservation,
    Protocol,
    ScientistAction,
    ScientistActionType,
    ScientistObservation,
)
from replicalab.parsing import parse_action
from replicalab.prompts import build_messages, default_count_tokens, system_prompt

MAX_SYSTEM_WORDS = 350

PROTOCOL = Protocol(
    sample_size=12, controls=["vehicle control"], technique="qPCR", duration_days=9,
    required_equipment=["thermocycler"], required_reagents=["SYBR green mix"], rationale="mirrors the paper",
)
HISTORY = [
    ConversationEntry(role="scientist", message=f"message number {i}", round_number=i // 2 + 1,
                      action_type="propose_protocol" if i % 2 == 0 else "reject")
    for i in range(8)
]
SCIENTIST_OBS = ScientistObservation(
    paper_title="Gene X silencing", paper_hypothesis="X drives Y", paper_method="siRNA knockdown",
    paper_key_finding="Y falls by half", experiment_goal="replicate the knockdown effect",
    conversation_history=HISTORY, current_protocol=PROTOCOL, round_number=5, max_rounds=6,
)
SENTINELS = ("zz_sentinel_centrifuge", "98765.43", "zz_booked_item", "zz_stock_reagent",
             "zz_missing_reagent", "zz_no_open_flames", "4321 days")
LAB_OBS = LabManagerObservation(
    budget_total=98765.43, budget_remaining=1234.5, equipment_available=["zz_sentinel_centrifuge"],
    equipment_booked=["zz_booked_item"], reagents_in_stock=["zz_stock_reagent"],
    reagents_out_of_stock=["zz_missing_reagent"], staff_count=7, time_limit_days=4321,
    safety_restrictions=["zz_no_open_flames"], conversation_history=HISTORY, current_protocol=PROTOCOL,
    round_number=5, max_rounds=6,
)


def _text(messages: list[dict[str, str]]) -> str:
    return "\n".join(m["content"] for m in messages)


def _total(messages: list[dict[str, str]], count: Any = default_count_tokens) -> int:
    return sum(count(m["content"]) for m in messages)


# ---------------------------------------------------------------- system message


@pytest.mark.parametrize(
    ("role", "model", "enum"),
    [("scientist", ScientistAction, ScientistActionType), ("lab_manager", LabManagerAction, LabManagerActionType)],
)
def test_system_lists_every_field_and_enum_value(role: str, model: Any, enum: Any) -> None:
    text = system_prompt(role)
    for name in model.model_fields:
        assert f"- {name}:" in text
    for member in enum:
        assert member.value in text
    assert "Reply with exactly one JSON object." in text
    assert len(text.split()) < MAX_SYSTEM_WORDS


def test_system_states_rules_and_goal() -> None:
    sci, lab = system_prompt("scientist"), system_prompt("lab_manager")
    assert "sample_size >= 1" in sci and "request_info" in sci and "no protocol payload" in sci
    assert "replicates the paper" in sci
    assert "feasible must equal budget_ok and equipment_ok" in lab
    assert "accept needs feasible=true" in lab and "only on suggest_alternative" in lab
    assert "budget" in lab and "flags must be the truth" in lab and "share of the budget left unspent" in lab


@pytest.mark.parametrize("role", ["scientist", "lab_manager"])
def test_system_example_is_a_valid_action(role: str) -> None:
    example = next(line for line in system_prompt(role).splitlines() if line.startswith("Example: "))
    assert not isinstance(parse_action(example.removeprefix("Example: "), role), InvalidAction)  # type: ignore[arg-type]


def test_message_shape_and_system_is_cached() -> None:
    for obs, role in ((SCIENTIST_OBS, "scientist"), (LAB_OBS, "lab_manager")):
        messages = build_messages(obs)
        assert [m["role"] for m in messages] == ["system", "user"]
        assert messages[0]["content"] is system_prompt(role)
    with pytest.raises(TypeError):
        build_messages("not an observation")  # type: ignore[arg-type]


# ---------------------------------------------------------------- user message


def test_scientist_facts_protocol_and_dialogue_appear() -> None:
    user = build_messages(SCIENTIST_OBS)[1]["content"]
    for fact in ("Gene X silencing", "X drives Y", "siRNA knockdown", "Y falls by half",
                 "replicate the knockdown effect", "Round 5 of 6"):
        assert fact in user
    for value in ("12", "vehicle control", "qPCR", "9", "thermocycler", "SYBR green mix", "mirrors the paper"):
        assert value in user
    assert "[round 1] scientist (propose_protocol): message number 0" in user
    assert "[round 4] scientist (reject): message number 7" in user


def test_lab_manager_facts_appear() -> None:
    user = build_messages(LAB_OBS)[1]["content"]
    for sentinel in SENTINELS:
        assert sentinel in user
    assert "1234.50" in user and "Staff: 7" in user and "qPCR" in user


def test_scientist_prompt_never_contains_lab_facts() -> None:
    text = _text(build_messages(SCIENTIST_OBS))
    for sentinel in SENTINELS:
        assert sentinel not in text
    assert "zz_" not in text


def test_empty_observation_renders() -> None:
    obs = ScientistObservation(paper_title="t", paper_hypothesis="h", paper_method="m",
                               paper_key_finding="k", experiment_goal="g")
    user = build_messages(obs)[1]["content"]
    assert "Current protocol: none yet" in user and "Dialogue: none yet" in user


def test_deterministic() -> None:
    for obs in (SCIENTIST_OBS, LAB_OBS):
        twin = type(obs).model_validate_json(obs.model_dump_json())
        assert build_messages(obs) == build_messages(twin)
        assert build_messages(obs, token_budget=700) == build_messages(twin, token_budget=700)


# ---------------------------------------------------------------- trimming


@pytest.mark.parametrize("obs", [SCIENTIST_OBS, LAB_OBS])
def test_tiny_budget_keeps_system_facts_and_protocol(obs: Any) -> None:
    full = build_messages(obs)
    tiny = build_messages(obs, token_budget=1)
    assert tiny[0] == full[0]
    assert "(8 earlier messages omitted)" in tiny[1]["content"]
    assert "message number" not in tiny[1]["content"]
    protocol_line = next(l for l in full[1]["content"].splitlines() if l.startswith("Current protocol:"))
    assert protocol_line in tiny[1]["content"]


def test_no_budget_and_large_budget_keep_everything() -> None:
    full = build_messages(SCIENTIST_OBS)
    assert build_messages(SCIENTIST_OBS, token_budget=10**6) == full
    assert "omitted" not in full[1]["content"]


def test_dialogue_is_trimmed_oldest_first() -> None:
    full_total = _total(build_messages(SCIENTIST_OBS), len)
    previous_kept, partial_seen = -1, False
    for budget in range(full_total - 400, full_total + 1, 10):
        messages = build_messages(SCIENTIST_OBS, token_budget=budget, count_tokens=len)
        kept = [i for i in range(8) if f": message number {i}\n" in messages[1]["content"]]
        partial_seen = partial_seen or 0 < len(kept) < 8
        assert kept == list(range(8 - len(kept), 8))  # always a suffix: the newest entries survive
        assert len(kept) >= previous_kept  # more budget never keeps fewer entries
        previous_kept = len(kept)
        if kept:
            assert _total(messages, len) <= budget
        if len(kept) < 8:
            assert f"({8 - len(kept)} earlier messages omitted)" in messages[1]["content"]
    assert previous_kept == 8 and partial_seen


entries = st.builds(
    ConversationEntry,
    role=st.sampled_from(["scientist", "lab_manager", "system"]),
    message=st.text(min_size=1, max_size=300).filter(str.strip),
    round_number=st.integers(min_value=0, max_value=10),
    action_type=st.one_of(st.none(), st.sampled_from(["accept", "reject", "request_info"])),
)


@settings(max_examples=100, deadline=None)
@given(history=st.lists(entries, max_size=12), budget=st.integers(min_value=0, max_value=3000))
def test_trimming_property(history: list[ConversationEntry], budget: int) -> None:
    obs = SCIENTIST_OBS.model_copy(update={"conversation_history": history})
    messages = build_messages(obs, token_budget=budget)
    user = messages[1]["content"]
    assert messages[0]["content"] == system_prompt("scientist")
    assert "Gene X silencing" in user and '"technique":"qPCR"' in user
    if _total(messages) > budget:  # only the minimal version may exceed the budget
        assert not history or f"({len(history)} earlier messages omitted)" in user


def _scientist_followups(scientist: str, template: str, difficulty: str, seeds: range) -> list[tuple[str, str]]:
    """(the Lab Manager's latest action type, the Scientist's follow-up message) of scripted episodes."""
    from training.model.sft_data import record_episode

    out = []
    for seed in seeds:
        turns, _, log = record_episode(seed, template, difficulty, scientist=scientist)
        lab_types = [e.action_type for e in log.transcript if e.role == "lab_manager"]
        out += [(kind, turn["prompt"][-1]["content"]) for kind, turn in zip(lab_types, turns[1:])]
    return out


@pytest.mark.slow
@pytest.mark.parametrize("template", ["cell_biology", "ml_benchmark", "behavioral_psychology"])
def test_followup_states_what_the_lab_changed_right_before_the_reply(template: str) -> None:
    """Every Scientist follow-up ends with a plain statement of the Lab Manager's latest turn, the lab's
    suggestion under the reply's keys, the brief's power statement and then the reply instruction; a
    technique move is stated as such exactly when the suggestion moves it."""
    import json

    from replicalab.dialogue import suggestion_in
    from replicalab.models import ScientistAction
    from replicalab.parsing import field_order
    from replicalab.prompts import LAB_TERMS
    from replicalab.scenario_records import POWER_STATEMENT

    power = POWER_STATEMENT.split("{n}")[0]
    numbered = 0
    for difficulty in ("medium", "hard"):
        for kind, text in _scientist_followups("reader+defender+asker", template, difficulty, range(30)):
            lines = text.splitlines()
            assert lines[-1].startswith("Your move as the Scientist.")
            assert lines[-2].startswith(power) and lines[-2].endswith("}.")
            minimum = json.loads(lines[-2].split(": ", 1)[1].removesuffix("."))
            assert list(minimum) == ["sample_size"] and f"at least {minimum['sample_size']} " in lines[-2]
            moved = [line for line in lines if line.startswith("The lab moved the technique from ")]
            suggested = suggestion_in(text)
            assert bool(moved) == ("technique" in suggested), text
            statement = {"accept": "The lab accepted the plan.",
                         "reject": "The lab rejected the plan and offered no alternative.",
                         "report_feasibility": "The lab reported on the plan and suggested no change."}
            if kind == "suggest_alternative" and suggested:
                assert lines[-3].startswith(LAB_TERMS) and lines[-3].endswith("}."), text
                terms = json.loads(lines[-3].removeprefix(LAB_TERMS).removesuffix("."))
                # every suggested field, under the key a reply writes it with, in the reply's order
                assert list(terms) == [k for k in field_order(ScientistAction) if k in terms]
                keys = {"required_equipment": "equipment", "required_reagents": "reagents"}
                assert {keys.get(k, k) for k in terms} == set(suggested), text
                for key, value in terms.items():
                    said = suggested[keys.get(key, key)]
                    assert (", ".join(value) if isinstance(value, list) else str(value)) == said, text
                assert lines[-4].startswith(("The lab moved the technique", "The lab changed", "The lab also changed"))
                numbered += 1
            elif kind == "suggest_alternative":
                assert lines[-3].startswith(("The lab moved the technique", "The lab changed", "The lab also changed"))
            else:
                assert lines[-3] == statement[kind]
            if moved:
                technique = suggestion_in(text)["technique"]
                assert moved[0].endswith(f" to {technique}.")
    assert numbered > 10


@pytest.mark.slow
@pytest.mark.parametrize("scientist", ["reader+defender+asker", "reader", "asker", "naive"])
def test_no_prompt_holds_a_ready_made_reply(scientist: str) -> None:
    """Every message a model sees in either seat -- the first prompt and every follow-up -- states facts
    only: no action written out (no ``action_type`` outside the system message's format example), and no
    Scientist reply of the episode, as the model would write it, appears anywhere in the Scientist's chat
    before the turn that sends it (the brief states protocols, never a reply)."""
    from replicalab.models import ScientistAction
    from replicalab.parsing import format_action
    from training.model.sft_data import record_episode

    replies = 0
    for template in ("cell_biology", "ml_benchmark", "behavioral_psychology"):
        for difficulty in ("medium", "hard"):
            for seed in range(12):
                turns, lab_turns, _ = record_episode(seed, template, difficulty, scientist=scientist)
                for turn in turns + lab_turns:
                    assert all('"action_type"' not in m["content"] for m in turn["prompt"] if m["role"] == "user")
                for turn in turns:
                    reply = format_action(ScientistAction.model_validate_json(turn["completion"][0]["content"]))
                    seen = "\n".join(m["content"] for m in turn["prompt"] if m["role"] != "assistant")
                    assert reply not in seen
                    replies += 1
    assert replies > 100


def test_followup_of_the_lab_manager_has_no_statement() -> None:
    """The statement is the Scientist's: the Lab Manager's follow-ups carry the dialogue and the lab's check, no statement."""
    from training.model.sft_data import record_episode

    for seed in range(10):
        _, lab_turns, _ = record_episode(seed, "cell_biology", "hard", scientist="reader")
        for turn in lab_turns[1:]:
            assert "The lab " not in turn["prompt"][-1]["content"]


@pytest.mark.parametrize("template", ["cell_biology", "ml_benchmark", "behavioral_psychology"])
def test_the_lab_manager_sees_the_labs_check_of_the_plan_on_the_table(template: str) -> None:
    """Every Lab Manager prompt ends, right before the reply instruction, with the lab's check of the current
    protocol on a line of its own: its flags are the lab's truth (the scripted Lab Manager's reply states them),
    ``feasible`` is their AND, its reasons are the plan's failures; before any protocol it says so."""
    import json

    from replicalab.models import LabManagerAction
    from training.model.sft_data import record_episode

    checked = 0
    for difficulty in ("easy", "medium", "hard"):
        for seed in range(8):
            _, lab_turns, _ = record_episode(seed, template, difficulty, scientist="reader+defender+asker")
            for turn in lab_turns:
                lines = turn["prompt"][-1]["content"].splitlines()
                assert lines[-1].startswith("Your move as the Lab Manager.")
                assert lines[-3] == "Lab check of the current protocol:"
                check = json.loads(lines[-2])
                reply = LabManagerAction.model_validate_json(turn["completion"][0]["content"])
                flags = ("budget_ok", "equipment_ok", "reagents_ok", "schedule_ok", "staff_ok", "feasible")
                assert list(check) == [*flags, "reasons"]
                assert [check[f] for f in flags] == [getattr(reply, f) for f in flags]
                assert bool(check["reasons"]) == (not check["feasible"])
                checked += 1
    assert checked > 40


def test_the_check_line_before_any_protocol_says_there_is_none() -> None:
    obs = LabManagerObservation(budget_total=10.0, budget_remaining=10.0, staff_count=1, time_limit_days=3)
    text = build_messages(obs)[-1]["content"]
    assert "Lab check of the current protocol: none yet" in text


@pytest.mark.parametrize("template", ["cell_biology", "ml_benchmark", "behavioral_psychology"])
def test_the_lab_managers_prompt_states_its_catalog_and_the_scientists_does_not(template: str) -> None:
    """Every technique the lab runs is named in the Lab Manager's prompt, in the lab's order, with each slot's
    options; the Scientist's prompt names no catalog."""
    from replicalab import ReplicaLabEnv

    env = ReplicaLabEnv()
    first = env.reset(5, template, "hard")
    view = env.step(ScientistAction(action_type="propose_protocol",
                                    **env.scenario.paper_protocol.model_dump())).observation.lab_manager
    text = build_messages(view)[-1]["content"]
    line = next(row for row in text.splitlines() if row.startswith("Techniques the lab runs, in its order of preference: "))
    at = [line.index(f"{t.id} (at least {t.min_days} days; ") for t in view.lab_techniques]
    assert at == sorted(at) and len(at) == len(env.scenario.lab.routine_techniques) > 0
    for t in view.lab_techniques:
        for slot in t.equipment_slots + t.reagent_slots:
            assert " or ".join(slot) in line
    assert "Techniques the lab runs" not in build_messages(first.scientist)[-1]["content"]
