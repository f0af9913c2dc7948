"""Lab truth and the scripted Lab Manager."""

import random
import re

import pytest

from replicalab import (
    DIFFICULTIES,
    TEMPLATES,
    VALIDATION_SEEDS,
    TEST_SEEDS,
    ReplicaLabEnv,
    generate_scenario,
    run_episode,
)
from replicalab.agents import SCIENTIST_FACTORIES
from replicalab.lab import ScriptedLabManager, check_feasibility
from replicalab.lab.answers import answer_question
from replicalab.lab.feasibility import HOURS_PER_STAFF_DAY
from replicalab.models import LabManagerAction, LabManagerObservation, Protocol
from replicalab.prompts import build_messages

CELLS = [(t, d) for t in TEMPLATES for d in DIFFICULTIES]


def _with(p: Protocol, **change) -> Protocol:
    return p.model_copy(update=change)


def _obs(s, protocol, history=()):
    lab = s.lab
    return LabManagerObservation(
        budget_total=lab.budget_total, budget_remaining=lab.budget_total,
        equipment_available=list(lab.equipment_available), equipment_booked=list(lab.equipment_booked),
        reagents_in_stock=list(lab.reagents_in_stock), reagents_out_of_stock=list(lab.reagents_out_of_stock),
        staff_count=lab.staff_count, time_limit_days=lab.time_limit_days,
        safety_restrictions=list(lab.safety_restrictions), conversation_history=list(history),
        current_protocol=protocol, round_number=0, max_rounds=6,
    )


def test_each_dimension_fails_with_a_reason():
    s = generate_scenario(3, "cell_biology", "easy")
    ref = s.reference_protocol
    assert check_feasibility(ref, s).ok
    huge = check_feasibility(_with(ref, sample_size=10**6), s)
    assert "budget" in huge.failed and "staff" in huge.failed and "over the lab's budget" in huge.reasons["budget"][0]
    late = check_feasibility(_with(ref, duration_days=s.lab.time_limit_days + 1), s)
    assert late.failed == ("schedule",) or "schedule" in late.failed
    assert "time limit" in " ".join(late.reasons["schedule"])
    zero = check_feasibility(_with(ref, duration_days=0), s)
    assert "schedule" in zero.failed and "needs more than" in zero.reasons["schedule"][0]
    empty = check_feasibility(_with(ref, required_equipment=[], required_reagents=[]), s)
    assert {"equipment", "reagents"} <= set(empty.failed) and empty.missing_slots
    invented = check_feasibility(_with(ref, required_equipment=ref.required_equipment + ["warp_drive"]), s)
    assert invented.unknown_items == ("warp_drive",) and "equipment" in invented.failed


def test_booked_out_of_stock_and_safety_are_reported():
    found = set()
    for seed in range(200):
        s = generate_scenario(seed, "cell_biology", "hard")
        r = check_feasibility(s.paper_protocol, s)
        text = " ".join(x for d in r.failed for x in r.reasons[d])
        found |= {k for k in ("booked during the window", "out of stock", "forbidden by the lab's safety rules",
                              "the lab has no") if k in text}
    assert len(found) == 4


@pytest.mark.parametrize("template, difficulty", CELLS)
def test_manager_always_emits_valid_actions_and_useful_suggestions(template, difficulty):
    rng = random.Random(0)
    for seed in TEST_SEEDS[:60]:
        s = generate_scenario(seed, template, difficulty)
        lm = ScriptedLabManager(s)
        candidates = [s.paper_protocol, s.reference_protocol, None,
                      _with(s.paper_protocol, sample_size=rng.randint(1, 10**5), duration_days=rng.randint(0, 40)),
                      _with(s.paper_protocol, required_equipment=[], technique="no_such_technique")]
        for p in candidates:
            action = lm(_obs(s, p))
            assert isinstance(action, LabManagerAction)
            LabManagerAction.model_validate(action.model_dump())  # re-validates every rule
            if p is None:
                continue
            report = check_feasibility(p, s)
            assert (action.action_type.value == "accept") == report.ok
            assert action.feasible == report.ok
            if action.action_type.value == "suggest_alternative":
                from replicalab.dialogue import apply_suggestion

                after = check_feasibility(apply_suggestion(p, action), s)
                assert after.ok or len(after.failed) < len(report.failed)


def test_questions_get_answers_from_the_lab():
    s = generate_scenario(8, "ml_benchmark", "medium")
    lab = s.lab
    assert f"{lab.budget_total:.0f}" in answer_question("What is our budget?", s)
    assert f"{lab.staff_count} people" in answer_question("How many staff do we have?", s)
    assert f"{lab.time_limit_days} days" in answer_question("How many days?", s)
    item = lab.equipment_booked[0] if lab.equipment_booked else lab.equipment_available[0]
    expected = "booked" if lab.equipment_booked else "available"
    assert expected in answer_question(f"Is {item} available?", s)
    assert answer_question("What is the meaning of life?", s) is None


def test_manager_stays_valid_when_the_repair_drops_every_listed_item():
    """Regression: items of another template (a model's copy error) are dropped by the repair; an
    empty list cannot be suggested, so the manager must not build an invalid suggestion."""
    s = generate_scenario(1000002, "ml_benchmark", "medium")
    p = Protocol(sample_size=11, controls=["ablation_no_pretraining", "random_baseline", "seed_variance_runs"],
                 technique="linear_probe", duration_days=9, required_equipment=["a100_node"],
                 required_reagents=["participant_payment", "stimulus_set", "tamoxifen"], rationale="copy")
    action = ScriptedLabManager(s)(_obs(s, p))
    LabManagerAction.model_validate(action.model_dump())
    if action.action_type.value == "suggest_alternative":
        assert action.suggested_equipment or action.suggested_reagents or action.suggested_technique \
            or action.suggested_sample_size or action.suggested_duration_days


_NUMBER = re.compile(r"\d+(?:\.\d+)?")


@pytest.mark.parametrize("scientist", ["naive", "reader+defender+asker"])
def test_explanations_cite_only_what_the_lab_manager_observes(scientist):
    """Every figure in the scripted Lab Manager's explanation is one its own observation shows, so a
    policy in that seat can write the same explanation (the hidden prices and staff rates stay out)."""
    checked = 0
    for seed in list(TEST_SEEDS)[:4]:
        for template, difficulty in CELLS:
            lab_manager = ScriptedLabManager(generate_scenario(seed, template, difficulty))

            def seat(obs, lab_manager=lab_manager):
                nonlocal checked
                action = lab_manager(obs)
                seen = {float(x) for x in _NUMBER.findall(build_messages(obs)[-1]["content"])}
                said = {float(x) for x in _NUMBER.findall(action.explanation)}
                assert said <= seen | {HOURS_PER_STAFF_DAY}, (action.explanation, said - seen)
                checked += 1
                return action

            run_episode(ReplicaLabEnv(), SCIENTIST_FACTORIES[scientist](seed, template, difficulty), seat,
                        seed=seed, template=template, difficulty=difficulty)
    assert checked >= len(CELLS) * 4


@pytest.mark.parametrize("template, difficulty", [(t, d) for t in TEMPLATES for d in DIFFICULTIES])
@pytest.mark.parametrize("scientist", ["naive", "reader"])
def test_no_dead_end_a_scripted_scientist_that_takes_the_labs_offers_agrees(template, difficulty, scientist):
    """The lab always offers an alternative it can run when the plan fails (it moves on to its next
    technique when its preferred one cannot fit even one sample), so every scripted Scientist that
    takes the lab's offers reaches agreement in every cell."""
    env = ReplicaLabEnv()
    for seed in VALIDATION_SEEDS[:60]:
        log = run_episode(env, SCIENTIST_FACTORIES[scientist](seed, template, difficulty),
                          seed=seed, template=template, difficulty=difficulty)
        assert log.agreement_reached, (scientist, template, difficulty, seed, log.transcript[-1].message)


class _TechniqueOnlyReviser:
    """Revises once, after the lab moves the technique: the published protocol with only the technique
    changed to the paper's cross-check method (the old technique's items kept)."""

    def __init__(self) -> None:
        self.switched = False

    def __call__(self, obs):
        from replicalab.agents.brief import cross_check_method, last_suggestion, published_protocol
        from replicalab.models import ScientistAction
        from replicalab.models import ScientistActionType as SA

        brief = published_protocol(obs)
        if obs.current_protocol is None:
            return ScientistAction(action_type=SA.PROPOSE_PROTOCOL, rationale="The paper.", **brief)
        method = cross_check_method(obs)
        moved = last_suggestion(obs).get("technique", "")
        if self.switched or not moved or moved == method["technique"]:
            return ScientistAction(action_type=SA.ACCEPT)
        self.switched = True
        return ScientistAction(action_type=SA.REVISE_PROTOCOL, rationale="Cross-check method.",
                               **{**brief, "technique": method["technique"]})


@pytest.mark.parametrize("template", TEMPLATES)
def test_lab_fits_the_items_of_a_plan_moved_to_another_technique(template):
    """A plan that names a technique but kept another technique's items gets them replaced by its own
    technique's: naming the cross-check technique alone gets (nearly) the reader's result on hard cells."""
    env = ReplicaLabEnv()
    seeds = VALIDATION_SEEDS[:40]
    logs = [run_episode(env, _TechniqueOnlyReviser(), seed=s, template=template, difficulty="hard") for s in seeds]
    reader = [run_episode(env, SCIENTIST_FACTORIES["reader"](s, template, "hard"), seed=s, template=template,
                          difficulty="hard") for s in seeds]
    mean = lambda xs: sum(x.total_reward for x in xs) / len(xs)  # noqa: E731
    assert sum(log.agreement_reached for log in logs) >= 0.9 * len(seeds)
    assert mean(logs) >= mean(reader) - 1.0


def test_lab_never_adds_items_to_a_plan_that_left_its_own_out():
    from replicalab.lab.repair import repair_plan

    for seed in range(20):
        s = generate_scenario(seed, "cell_biology", "medium")
        bare = s.paper_protocol.model_copy(update={"required_equipment": [], "required_reagents": []})
        repaired = repair_plan(bare, s)
        if repaired is not None:
            assert not repaired.required_equipment
            assert not set(repaired.required_reagents)
