"""The records ``ReplicaLabEnv`` builds from its state: each role's view, the lab's prices, the last
step's result, the episode state and the episode log.

Pure functions of the scenario and of values the env passes in.  Every record is built with ``trusted``
(its parts were validated when they entered the env), its fields named in declaration order.
"""

from __future__ import annotations

from replicalab.judge import REWARD_SPEC_VERSION, Judgement
from replicalab.lab.feasibility import FeasibilityReport, plan_cost
from replicalab.models import (
    ConversationEntry,
    EpisodeLog,
    EpisodeState,
    LabManagerObservation,
    LabTechnique,
    Observation,
    Protocol,
    ScientistObservation,
    StepInfo,
    StepResult,
    TurnRecord,
)
from replicalab.scenario_records import Scenario, canonical_id
from replicalab.trusted import trusted


def scientist_view(s: Scenario, history: list[ConversationEntry], protocol: Protocol | None,
                   round_number: int, max_rounds: int) -> Observation:
    """The Scientist's view: the paper brief, the goal and the dialogue, never the lab."""
    view = trusted(
        ScientistObservation, paper_title=s.paper_title, paper_hypothesis=s.paper_hypothesis,
        paper_method=s.paper_method, paper_key_finding=s.paper_key_finding, experiment_goal=s.experiment_goal,
        conversation_history=list(history), current_protocol=protocol,
        round_number=round_number, max_rounds=max_rounds,
    )
    return trusted(Observation, scientist=view, lab_manager=None)


def lab_manager_view(s: Scenario, history: list[ConversationEntry], protocol: Protocol | None,
                     round_number: int, max_rounds: int, budget_remaining: float,
                     report: FeasibilityReport | None, techniques: list[LabTechnique]) -> Observation:
    """The Lab Manager's view: the lab, the dialogue, the lab's prices for the protocol on the table and its
    check of it (``report``, None before any protocol) and its catalog (``techniques``: ``lab_techniques(s)``,
    made once per episode)."""
    lab = s.lab
    view = trusted(
        LabManagerObservation, budget_total=lab.budget_total, budget_remaining=budget_remaining,
        equipment_available=list(lab.equipment_available), equipment_booked=list(lab.equipment_booked),
        reagents_in_stock=list(lab.reagents_in_stock), reagents_out_of_stock=list(lab.reagents_out_of_stock),
        staff_count=lab.staff_count, time_limit_days=lab.time_limit_days,
        safety_restrictions=list(lab.safety_restrictions), conversation_history=list(history),
        current_protocol=protocol, round_number=round_number, max_rounds=max_rounds,
        **prices(protocol, s),
        plan_check={flag: list(why) for flag, why in report.flag_reasons().items()} if report is not None else {},
        lab_techniques=list(techniques),
    )
    return trusted(Observation, scientist=None, lab_manager=view)


def lab_techniques(s: Scenario) -> list[LabTechnique]:
    """The techniques the lab of ``s`` runs, in its order of preference, each with its slots and minimum days."""
    out = []
    for technique_id in s.lab.routine_techniques:
        t = s.techniques[technique_id]
        out.append(trusted(LabTechnique, id=t.id, equipment_slots=[list(slot) for slot in t.equipment_slots],
                           reagent_slots=[list(slot) for slot in t.reagent_slots], min_days=t.min_days))
    return out


def prices(p: Protocol | None, s: Scenario) -> dict:
    """The lab's prices for the protocol on the table: each control's flat cost, one sample's cost."""
    if p is None:
        return {"control_costs": {}, "cost_per_sample": 0.0}
    controls = {c: s.control_costs[c] for c in map(canonical_id, p.controls) if c in s.control_costs}
    per_sample = plan_cost({}, s.reagent_costs, {}, [], list(map(canonical_id, p.required_reagents)), [], 1, 0)
    return {"control_costs": controls, "cost_per_sample": per_sample}


def final_result(j: Judgement, agreement: bool, error: str | None, extra: dict) -> StepResult:
    """The last step's result: no observation, the judge's total as reward, its breakdown, notes, verdict and
    each role's reward in ``info``, followed by the env's ``extra`` keys (terminated, truncated, invalid_turn)."""
    info = StepInfo(
        agreement_reached=agreement, error=error, reward_breakdown=j.breakdown,
        judge_notes=j.notes, verdict=j.verdict, total_reward=j.total, role_rewards=j.role_rewards(), **extra,
    )
    return trusted(StepResult, observation=None, reward=j.total, done=True, info=info)


def episode_state(
    s: Scenario, j: Judgement | None, *, budget_remaining: float, protocol: Protocol | None,
    history: list[ConversationEntry], round_number: int, max_rounds: int, done: bool, agreement: bool,
) -> EpisodeState:
    """The full state; the scores are ``j``'s once the episode is judged (zero before)."""
    lab = s.lab
    return trusted(
        EpisodeState, seed=s.seed, scenario_template=s.template, difficulty=s.difficulty, paper_title=s.paper_title,
        paper_hypothesis=s.paper_hypothesis, paper_method=s.paper_method,
        paper_key_finding=s.paper_key_finding, experiment_goal=s.experiment_goal,
        lab_budget_total=float(lab.budget_total), lab_budget_remaining=float(budget_remaining),
        lab_equipment=list(lab.equipment_available), lab_reagents=list(lab.reagents_in_stock),
        lab_staff_count=lab.staff_count, lab_time_limit_days=lab.time_limit_days,
        current_protocol=protocol, conversation_history=list(history),
        round_number=round_number, max_rounds=max_rounds, done=done,
        agreement_reached=agreement, reward=j.total if j else 0.0,
        rigor_score=j.breakdown.rigor if j else 0.0, feasibility_score=j.breakdown.feasibility if j else 0.0,
        fidelity_score=j.breakdown.fidelity if j else 0.0,
    )


def episode_log(
    s: Scenario, j: Judgement, final_state: EpisodeState, *, history: list[ConversationEntry], rounds_used: int,
    agreement: bool, turns: list[TurnRecord], max_rounds: int, terminated: bool, truncated: bool,
    invalid_turns: dict[str, int],
) -> EpisodeLog:
    """The completed episode's record; its id derives from the scenario (template, difficulty, seed)."""
    return trusted(
        EpisodeLog, episode_id=f"{s.template}-{s.difficulty}-{s.seed}", seed=s.seed, scenario_template=s.template,
        difficulty=s.difficulty, final_state=final_state, transcript=list(history),
        reward_breakdown=j.breakdown, total_reward=j.total, rounds_used=rounds_used,
        agreement_reached=agreement, judge_notes=j.notes, verdict=j.verdict,
        reward_spec_version=REWARD_SPEC_VERSION, turns=list(turns), max_rounds=max_rounds,
        terminated=terminated, truncated=truncated, invalid_turns=dict(invalid_turns),
        role_rewards=j.role_rewards(),
    )
