"""Env rules, determinism, replay and bad input."""

import json
import subprocess
import sys

import pytest

from replicalab import (
    DIFFICULTIES,
    TEMPLATES,
    ReplicaLabEnv,
    replay_episode,
    run_episode,
)
from replicalab.agents import (
    SKILLS,
    NaiveScientist,
    OracleScientist,
    RandomScientist,
    SkilledScientist,
)
from replicalab.models import InvalidAction, LabManagerAction, ScientistAction

ACCEPT = ScientistAction(action_type="accept")
FLAGS_OK = dict(feasible=True, budget_ok=True, equipment_ok=True, reagents_ok=True, schedule_ok=True, staff_ok=True)
LM_ACCEPT = LabManagerAction(action_type="accept", explanation="fine", **FLAGS_OK)
LM_REPORT = LabManagerAction(action_type="report_feasibility", explanation="noted", **FLAGS_OK)


def _propose(env) -> ScientistAction:
    p = env.scenario.reference_protocol
    return ScientistAction(action_type="propose_protocol", **p.model_dump())


def test_bilateral_agreement_scientist_accepts_after_lab_manager():
    env = ReplicaLabEnv()
    obs = env.reset(1, "cell_biology", "easy")
    assert env.current_role == "scientist" and obs.lab_manager is None and obs.scientist is not None
    r = env.step(_propose(env))
    assert env.current_role == "lab_manager" and r.observation.scientist is None and not r.done
    r = env.step(LM_ACCEPT)
    assert not r.done
    r = env.step(ACCEPT)
    assert r.done and r.info.agreement_reached and r.info.terminated and r.reward > 8


def test_unilateral_accept_is_not_agreement_and_rounds_run_out():
    env = ReplicaLabEnv(max_rounds=3)
    env.reset(1, "cell_biology", "easy")
    env.step(_propose(env))
    while not env.done:
        if env.current_role == "lab_manager":
            r = env.step(LM_REPORT)
        else:
            r = env.step(ACCEPT)  # the lab manager never accepts
    assert r.done and not r.info.agreement_reached and r.info.truncated
    log = env.episode_log()
    assert log.verdict == "no_agreement" and log.total_reward < 0 and log.rounds_used == 3


def test_lab_manager_accept_of_accepted_suggestion_is_agreement():
    env = ReplicaLabEnv()
    env.reset(2, "ml_benchmark", "medium")
    log = run_episode(env, NaiveScientist(), seed=2, template="ml_benchmark", difficulty="medium")
    kinds = [(e.role, e.action_type) for e in log.transcript]
    assert kinds == [("scientist", "propose_protocol"), ("lab_manager", "suggest_alternative"),
                     ("scientist", "accept"), ("lab_manager", "accept")]
    assert log.agreement_reached and log.rounds_used == 2


def test_invalid_turns_consume_the_turn_and_two_in_a_row_end_it():
    env = ReplicaLabEnv()
    env.reset(3, "behavioral_psychology", "easy")
    r = env.step(ACCEPT)  # nothing on the table
    assert r.info.invalid_turn and not r.done and env.current_role == "lab_manager"
    env.step(LM_REPORT)
    r = env.step(InvalidAction(role="scientist", error="unparseable", raw_text="{{"))
    assert r.done and r.info.terminated and not r.info.agreement_reached
    log = env.episode_log()
    assert log.invalid_turns == {"scientist": 2, "lab_manager": 0}
    assert log.reward_breakdown.penalties["invalid_turns"] == 1.0
    assert log.turns[-1].raw_text == "{{" and log.turns[0].error.startswith("accept with no protocol")


def test_wrong_role_raises_and_leaves_state_untouched():
    env = ReplicaLabEnv()
    env.reset(4, "cell_biology", "medium")
    before = env.state().model_dump_json()
    with pytest.raises(ValueError, match="scientist's turn"):
        env.step(LM_ACCEPT)
    with pytest.raises(ValueError, match="scientist's turn"):
        env.step(InvalidAction(role="lab_manager", error="x"))
    assert env.state().model_dump_json() == before


def test_step_after_end_and_before_reset_raise():
    with pytest.raises(RuntimeError, match="reset"):
        ReplicaLabEnv().step(ACCEPT)
    env = ReplicaLabEnv()
    run_episode(env, NaiveScientist(), seed=0, template="cell_biology", difficulty="easy")
    with pytest.raises(RuntimeError, match="episode is over"):
        env.step(ACCEPT)
    with pytest.raises(ValueError, match="valid templates"):
        env.reset(0, "nope", "easy")
    with pytest.raises(ValueError):
        ReplicaLabEnv(max_rounds=0)


def test_episodes_are_always_bounded():
    env = ReplicaLabEnv()
    for seed in range(200):
        log = run_episode(env, RandomScientist(seed), seed=seed, template=TEMPLATES[seed % 3],
                          difficulty=DIFFICULTIES[seed % 3])
        assert log.rounds_used <= log.max_rounds and len(log.turns) <= 2 * log.max_rounds


@pytest.mark.parametrize("agent", [NaiveScientist, "skilled", "oracle", "random"])
def test_replay_reproduces_the_log(agent):
    env = ReplicaLabEnv()
    for seed, t, d in [(10, "cell_biology", "hard"), (11, "ml_benchmark", "medium"), (12, "behavioral_psychology", "easy")]:
        make = {"oracle": lambda: OracleScientist(env.scenario), "random": lambda: RandomScientist(seed),
                "skilled": lambda: SkilledScientist(SKILLS)}.get(agent, agent)
        env.reset(seed, t, d)
        log = run_episode(env, make(), seed=seed, template=t, difficulty=d)
        assert replay_episode(log).model_dump_json() == log.model_dump_json()


TWIN = """
import sys
from replicalab import ReplicaLabEnv, run_episode
from replicalab.agents import SKILLS, RandomScientist, SkilledScientist
env = ReplicaLabEnv()
for seed in range(6):
    for agent in (RandomScientist(seed), SkilledScientist(SKILLS)):
        sys.stdout.write(run_episode(env, agent, seed=seed, template="ml_benchmark", difficulty="hard").model_dump_json() + "\\n")
"""


def test_same_seed_same_log_in_two_processes():
    outs = [
        subprocess.run([sys.executable, "-c", TWIN], capture_output=True, text=True, check=True,
                       env={"PYTHONHASHSEED": str(h), "PATH": ""}).stdout
        for h in (1, 2)
    ]
    assert outs[0] == outs[1] and len(outs[0].splitlines()) == 12
    assert json.loads(outs[0].splitlines()[0])["episode_id"] == "ml_benchmark-hard-0"


def test_scientist_prompt_never_contains_lab_facts():
    from replicalab.prompts import build_messages

    env = ReplicaLabEnv()
    leaks = checked = 0
    for seed in range(150):
        t, d = TEMPLATES[seed % 3], DIFFICULTIES[seed % 3]
        obs = env.reset(seed, t, d)
        s = env.scenario
        scientist = SkilledScientist(SKILLS)
        said = ""
        while not env.done:
            if env.current_role == "scientist":
                text = " ".join(m["content"] for m in build_messages(obs.scientist))
                # every lab fact not yet said in the dialogue must be absent from the prompt
                secret = [f"{s.lab.budget_total:.2f}", *s.lab.safety_restrictions]
                secret += [i for i in s.lab.equipment_available + s.lab.equipment_booked + s.lab.reagents_in_stock
                           + s.lab.reagents_out_of_stock if i not in s.paper_method]
                leaks += sum(1 for x in secret if x and x in text and x not in said)
                checked += 1
                action = scientist(obs.scientist)
            else:
                action = __import__("replicalab.lab", fromlist=["x"]).ScriptedLabManager(s)(obs.lab_manager)
            r = env.step(action)
            said = " ".join(e.message for e in env.history)
            obs = r.observation
    assert leaks == 0 and checked > 150


def test_suggestions_read_back_from_the_rendered_message():
    from replicalab.models import LabManagerAction
    from replicalab.dialogue import render_lab_manager, suggestion_in

    flags = dict(budget_ok=False, equipment_ok=True, reagents_ok=True, schedule_ok=True, staff_ok=True)
    suggestion = LabManagerAction(
        action_type="suggest_alternative", feasible=False, **flags, explanation="Over budget; a; b=c.",
        suggested_technique="mtt_assay", suggested_sample_size=12, suggested_reagents=["dmso", "hela_cells"],
    )
    assert suggestion_in(render_lab_manager(suggestion)) == {
        "technique": "mtt_assay", "sample_size": "12", "reagents": "dmso, hela_cells"}
    accept = LabManagerAction(action_type="accept", feasible=True, **{k: True for k in flags}, explanation="ok")
    assert suggestion_in(render_lab_manager(accept)) == {}


def test_a_suggestion_reads_as_typed_protocol_fields():
    from replicalab.dialogue import suggested_fields

    text = {"technique": "mtt_assay", "sample_size": "12", "duration_days": "x", "equipment": "reader, hood",
            "reagents": "dmso", "controls": "vehicle"}
    assert suggested_fields(text) == {"technique": "mtt_assay", "sample_size": 12, "controls": ["vehicle"],
                                      "required_equipment": ["reader", "hood"], "required_reagents": ["dmso"]}
    assert suggested_fields({}) == {}


@pytest.mark.parametrize("template", TEMPLATES)
def test_the_lab_managers_view_carries_the_labs_check_of_the_plan(template):
    """The Lab Manager's observation holds the lab's check of the protocol on the table: empty before one, then
    each flag's reasons, so that a flag is true exactly when it has none -- the truth the env holds a Lab Manager
    turn to (flags stated from the check are accepted; one flipped is an invalid turn)."""
    from replicalab.env import UNTRUE_FLAGS
    from replicalab.lab import check_feasibility

    flags = ("budget_ok", "equipment_ok", "reagents_ok", "schedule_ok", "staff_ok")
    for difficulty in DIFFICULTIES:
        for seed in range(6):
            env = ReplicaLabEnv()
            obs = env.reset(seed, template, difficulty)
            assert env.current_role == "scientist"
            obs = env.step(ScientistAction(action_type="propose_protocol",
                                           **env.scenario.paper_protocol.model_dump())).observation
            view = obs.lab_manager
            assert tuple(view.plan_check) == flags
            truth = check_feasibility(env.protocol, env.scenario).flags()
            assert {f: not why for f, why in view.plan_check.items()} == truth
            stated = {f: not why for f, why in view.plan_check.items()}
            lie = dict(stated, budget_ok=not stated["budget_ok"])
            for said, valid in ((stated, True), (lie, False)):
                probe = env.__class__()
                probe.reset(seed, template, difficulty)
                probe.step(ScientistAction(action_type="propose_protocol", **env.scenario.paper_protocol.model_dump()))
                action = LabManagerAction(action_type="report_feasibility", explanation="checked",
                                          feasible=all(said.values()), **said)
                error = probe.step(action).info.error
                assert (error is None) == valid and (valid or error.startswith(UNTRUE_FLAGS))


def test_the_lab_managers_first_view_has_no_check():
    env = ReplicaLabEnv()
    env.reset(3, "cell_biology", "medium")
    result = env.step(ScientistAction(action_type="request_info", questions=["What is the budget?"]))
    assert env.protocol is None and result.observation.lab_manager.plan_check == {}


@pytest.mark.parametrize("template", TEMPLATES)
def test_the_lab_managers_view_holds_the_catalog_its_repairs_are_made_from(template):
    """The Lab Manager sees the techniques its lab runs, in the lab's order, each with its slots and minimum days;
    every repair a scripted lab suggests is written from that view: its technique is in the catalog, and each item
    it names is the plan's own or an option of one of the technique's slots."""
    from replicalab.lab import ScriptedLabManager

    repairs = 0
    for difficulty in DIFFICULTIES:
        for seed in range(8):
            env = ReplicaLabEnv()
            env.reset(seed, template, difficulty)
            view = env.step(ScientistAction(action_type="propose_protocol",
                                            **env.scenario.paper_protocol.model_dump())).observation.lab_manager
            catalog = {t.id: t for t in view.lab_techniques}
            assert list(catalog) == list(env.scenario.lab.routine_techniques)
            for t in view.lab_techniques:
                spec = env.scenario.techniques[t.id]
                assert t.min_days == spec.min_days
                assert [tuple(s) for s in t.equipment_slots] == list(spec.equipment_slots)
                assert [tuple(s) for s in t.reagent_slots] == list(spec.reagent_slots)
            for policy in ("cooperative", "thrifty"):
                action = ScriptedLabManager(env.scenario, policy)(view)
                if action.action_type.value != "suggest_alternative" or not action.suggested_technique:
                    continue
                repairs += 1
                technique = catalog[action.suggested_technique]
                options = {i for slot in technique.equipment_slots + technique.reagent_slots for i in slot}
                own = set(view.current_protocol.required_equipment + view.current_protocol.required_reagents)
                assert set(action.suggested_equipment + action.suggested_reagents) <= options | own
    assert repairs > 0
