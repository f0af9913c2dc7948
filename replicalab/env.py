"""``ReplicaLabEnv``: a single-episode, turn-based, pure state machine.

Rules:
- Each round the Scientist acts, then the Lab Manager.  ``current_role`` says who acts next; ``step``
  returns only that role's view.  A round ends after the Lab Manager's turn; after ``max_rounds``
  rounds without agreement the episode is truncated.
- Every protocol (proposed, revised or adopted from a suggestion) is a new version.  Agreement needs
  both sides to accept the same version: the Scientist accepts after the Lab Manager accepted it, or
  the Lab Manager accepts a version the Scientist accepted (a Scientist ``accept`` right after a
  ``suggest_alternative`` adopts the suggestion and accepts it).
- The environment answers a ``request_info`` turn itself, from the lab's truth (a ``system`` entry
  right after the question), so the Lab Manager seat cannot lie about the lab; for the same reason a
  Lab Manager turn whose five flags are not the truth about the protocol on the table is invalid.
- Invalid turns (an ``InvalidAction``, accepting when there is nothing to accept, revising or
  suggesting without a protocol, untrue flags) are recorded, penalised (to the role that made them)
  and use up the turn; two consecutive invalid turns by one role terminate the episode.
- Each role has its own reward (``EpisodeLog.role_rewards``): the Scientist's is the judge's total,
  the Lab Manager's weighs the agreed plan's core score against the budget the lab keeps.
- An action of the wrong role, or any step after the end, is a caller bug: it raises and leaves the
  state untouched.
"""

from __future__ import annotations

from replicalab.judge import REWARD_SPEC_VERSION, EpisodeFacts, judge, unknown_ids
from replicalab.judge.constants import RATIONALE_WORD_LIMIT
from replicalab.lab.answers import ANSWERS_PREFIX, answer_questions
from replicalab.lab.feasibility import Feasibility, FeasibilityReport, plan_cost
from replicalab.models import (
    ConversationEntry,
    EpisodeLog,
    EpisodeState,
    InvalidAction,
    LabManagerAction,
    LabManagerObservation,
    Observation,
    Protocol,
    ScientistAction,
    ScientistObservation,
    StepInfo,
    StepResult,
    TurnRecord,
)
from replicalab.models import (
    LabManagerActionType as LA,
)
from replicalab.models import (
    ScientistActionType as SA,
)
from replicalab.render import apply_suggestion, render_lab_manager, render_scientist
from replicalab.scenario_records import Scenario, canonical_id
from replicalab.scenarios import generate_scenario
from replicalab.trusted import trusted

DEFAULT_MAX_ROUNDS = 6
MAX_CONSECUTIVE_INVALID = 2


def _flags(a: LabManagerAction) -> tuple[bool, ...]:
    """The five flags of ``a``, in ``FeasibilityReport.flags`` order."""
    return a.budget_ok, a.equipment_ok, a.reagents_ok, a.schedule_ok, a.staff_ok


def _json_dump(action: ScientistAction | LabManagerAction) -> dict:
    """``action.model_dump(mode="json")``, straight from the model's serializer (without ``model_dump``'s
    keyword handling)."""
    return action.__pydantic_serializer__.to_python(action, mode="json")


class ReplicaLabEnv:
    def __init__(self, max_rounds: int = DEFAULT_MAX_ROUNDS):
        if isinstance(max_rounds, bool) or not isinstance(max_rounds, int) or max_rounds < 1:
            raise ValueError(f"max_rounds must be a positive integer, got {max_rounds!r}")
        self.max_rounds = max_rounds
        self.scenario: Scenario | None = None

    # ----- lifecycle -------------------------------------------------------------------------
    def reset(self, seed: int, template: str, difficulty: str) -> Observation:
        self.scenario = generate_scenario(seed, template, difficulty)
        self.feasibility = Feasibility(self.scenario)  # the lab's check, shared with the scripted Lab Manager
        self.current_role = "scientist"
        self.round_number = 0
        self.history: list[ConversationEntry] = []
        self.turns: list[TurnRecord] = []
        self.protocol: Protocol | None = None
        self.report: FeasibilityReport | None = None
        self.version = 0
        self.accepted = {"scientist": -1, "lab_manager": -1}
        self.suggestion: LabManagerAction | None = None
        self.invalid = {"scientist": 0, "lab_manager": 0}
        self.streak = {"scientist": 0, "lab_manager": 0}
        self.questions_asked = 0
        self.scientist_turns = 0
        self.hallucinated: set[str] = set()
        self.verbose_rationales = 0
        self.answerable = 0
        self.done = self.agreement = self.terminated = self.truncated = False
        self.judgement = None
        return self._observation()

    def step(self, action: ScientistAction | LabManagerAction | InvalidAction) -> StepResult:
        if self.scenario is None:
            raise RuntimeError("call reset() before step()")
        if self.done:
            raise RuntimeError("the episode is over; call reset() to start another")
        role = self.current_role
        self._check_role(action, role)
        self.scientist_turns += role == "scientist"
        error = None
        if isinstance(action, InvalidAction):
            error = action.error
        elif role == "scientist":
            error = self._scientist(action)
        else:
            error = self._lab_manager(action)
        self.turns.append(trusted(
            TurnRecord, role=role, round_number=self.round_number,
            action=None if isinstance(action, InvalidAction) else _json_dump(action),
            error=error, raw_text=action.raw_text if isinstance(action, InvalidAction) else "",
        ))
        if error is not None:
            self.invalid[role] += 1
            self.streak[role] += 1
            self._say("system", f"Invalid {role} turn: {error}", None)
            if self.streak[role] >= MAX_CONSECUTIVE_INVALID:
                self.done = self.terminated = True
        else:
            self.streak[role] = 0
        if not self.done:
            if role == "lab_manager":
                self.round_number += 1
                if self.round_number >= self.max_rounds:
                    self.done = self.truncated = True
            self.current_role = "lab_manager" if role == "scientist" else "scientist"
        return self._result(error)

    # ----- the two roles ---------------------------------------------------------------------
    def _scientist(self, a: ScientistAction) -> str | None:
        kind = a.action_type
        pending, self.suggestion = self.suggestion, None
        self.verbose_rationales += len(a.rationale.split()) > RATIONALE_WORD_LIMIT
        answers = None
        if kind is SA.REQUEST_INFO:
            self.questions_asked += len(a.questions)
            technique = canonical_id(self.protocol.technique) if self.protocol is not None else ""
            answers, answered = answer_questions(a.questions, self.scenario, technique)
            self.answerable += answered
        elif kind is SA.ACCEPT:
            if pending is not None and self.protocol is not None:
                self._new_version(apply_suggestion(self.protocol, pending))
            elif self.protocol is None:
                return "accept with no protocol on the table"
            self.accepted["scientist"] = self.version
            if self.accepted["lab_manager"] == self.version:
                self.done = self.agreement = self.terminated = True
        else:
            if kind is SA.REVISE_PROTOCOL and self.protocol is None:
                return "revise_protocol with no protocol to revise; use propose_protocol"
            self._new_version(trusted(
                Protocol, sample_size=a.sample_size, controls=a.controls, technique=a.technique,
                duration_days=a.duration_days, required_equipment=a.required_equipment,
                required_reagents=a.required_reagents, rationale=a.rationale,
            ))
        self._say("scientist", render_scientist(a), kind.value)
        if answers is not None:
            self._say("system", ANSWERS_PREFIX + answers, None)
        return None

    def _lab_manager(self, a: LabManagerAction) -> str | None:
        kind = a.action_type
        if kind in (LA.ACCEPT, LA.SUGGEST_ALTERNATIVE) and self.protocol is None:
            return f"{kind.value} with no protocol on the table"
        if self.protocol is not None:
            truth = self._report().flags()
            untrue = [] if _flags(a) == tuple(truth.values()) else [  # the usual case first: all true
                name for name, ok in truth.items() if getattr(a, name) != ok]
            if untrue:
                return "flags that are not the lab's truth about the plan: " + ", ".join(
                    f"{name} is {str(not getattr(a, name)).lower()}" for name in untrue)
        if kind is LA.ACCEPT:
            self.accepted["lab_manager"] = self.version
            if self.accepted["scientist"] == self.version:
                self.done = self.agreement = self.terminated = True
        elif kind is LA.SUGGEST_ALTERNATIVE:
            self.suggestion = a
        self._say("lab_manager", render_lab_manager(a), kind.value)
        return None

    def _new_version(self, protocol: Protocol) -> None:
        self.protocol = protocol
        self.version += 1
        self.report = None
        self.hallucinated.update(unknown_ids(protocol, self.scenario))

    def _report(self) -> FeasibilityReport:
        """The lab's verdict on the protocol on the table (computed once per version)."""
        if self.report is None:
            self.report = self.feasibility(self.protocol)
        return self.report

    def _say(self, role: str, message: str, action_type: str | None) -> None:
        self.history.append(trusted(
            ConversationEntry, role=role, message=message, round_number=self.round_number, action_type=action_type
        ))

    @staticmethod
    def _check_role(action, role: str) -> None:
        expected = ScientistAction if role == "scientist" else LabManagerAction
        if isinstance(action, InvalidAction):
            if action.role != role:
                raise ValueError(f"it is the {role}'s turn, got an InvalidAction of the {action.role}")
        elif not isinstance(action, expected):
            raise ValueError(f"it is the {role}'s turn: expected {expected.__name__}, got {type(action).__name__}")

    # ----- views -----------------------------------------------------------------------------
    def _observation(self) -> Observation | None:
        if self.done:
            return None
        s, lab = self.scenario, self.scenario.lab
        if self.current_role == "scientist":
            view = trusted(
                ScientistObservation, paper_title=s.paper_title, paper_hypothesis=s.paper_hypothesis,
                paper_method=s.paper_method, paper_key_finding=s.paper_key_finding, experiment_goal=s.experiment_goal,
                conversation_history=list(self.history), current_protocol=self.protocol,
                round_number=self.round_number, max_rounds=self.max_rounds,
            )
            return trusted(Observation, scientist=view, lab_manager=None)
        view = trusted(
            LabManagerObservation, budget_total=lab.budget_total, budget_remaining=self._budget_remaining(),
            equipment_available=list(lab.equipment_available), equipment_booked=list(lab.equipment_booked),
            reagents_in_stock=list(lab.reagents_in_stock), reagents_out_of_stock=list(lab.reagents_out_of_stock),
            staff_count=lab.staff_count, time_limit_days=lab.time_limit_days,
            safety_restrictions=list(lab.safety_restrictions), conversation_history=list(self.history),
            current_protocol=self.protocol, round_number=self.round_number, max_rounds=self.max_rounds,
            **self._prices(),
        )
        return trusted(Observation, scientist=None, lab_manager=view)

    def _prices(self) -> dict:
        """The lab's prices for the protocol on the table: each control's flat cost, one sample's cost."""
        p, s = self.protocol, self.scenario
        if p is None:
            return {"control_costs": {}, "cost_per_sample": 0.0}
        controls = {c: s.control_costs[c] for c in map(canonical_id, p.controls) if c in s.control_costs}
        per_sample = plan_cost({}, s.reagent_costs, {}, [], list(map(canonical_id, p.required_reagents)), [], 1, 0)
        return {"control_costs": controls, "cost_per_sample": per_sample}

    def _budget_remaining(self) -> float:
        budget = self.scenario.lab.budget_total
        if self.protocol is None:
            return budget
        return max(0.0, round(budget - self._report().cost, 2))

    def _judge(self):
        if self.judgement is None:
            facts = EpisodeFacts(
                agreement=self.agreement, rounds_used=self.rounds_used, max_rounds=self.max_rounds,
                invalid_turns=self.invalid["scientist"], lab_manager_invalid_turns=self.invalid["lab_manager"],
                questions_asked=self.questions_asked,
                answerable_questions=self.answerable, hallucinated=tuple(sorted(self.hallucinated)),
                verbose_rationales=self.verbose_rationales,
            )
            report = self._report() if self.protocol is not None else None
            self.judgement = judge(self.protocol, self.scenario, facts, report)
        return self.judgement

    @property
    def rounds_used(self) -> int:
        """Rounds in which the Scientist has acted."""
        return self.scientist_turns

    def _result(self, error: str | None) -> StepResult:
        extra = dict(terminated=self.terminated, truncated=self.truncated, invalid_turn=error is not None)
        if not self.done:
            info = StepInfo(agreement_reached=False, error=error, **extra)
            return trusted(StepResult, observation=self._observation(), reward=0.0, done=False, info=info)
        j = self._judge()
        info = StepInfo(
            agreement_reached=self.agreement, error=error, reward_breakdown=j.breakdown,
            judge_notes=j.notes, verdict=j.verdict, total_reward=j.total, role_rewards=j.role_rewards(), **extra,
        )
        return trusted(StepResult, observation=None, reward=j.total, done=True, info=info)

    def state(self) -> EpisodeState:
        if self.scenario is None:
            raise RuntimeError("call reset() before state()")
        s, lab = self.scenario, self.scenario.lab
        j = self._judge() if self.done else None
        return trusted(
            EpisodeState, seed=s.seed, scenario_template=s.template, difficulty=s.difficulty, paper_title=s.paper_title,
            paper_hypothesis=s.paper_hypothesis, paper_method=s.paper_method,
            paper_key_finding=s.paper_key_finding, experiment_goal=s.experiment_goal,
            lab_budget_total=float(lab.budget_total), lab_budget_remaining=float(self._budget_remaining()),
            lab_equipment=list(lab.equipment_available), lab_reagents=list(lab.reagents_in_stock),
            lab_staff_count=lab.staff_count, lab_time_limit_days=lab.time_limit_days,
            current_protocol=self.protocol, conversation_history=list(self.history),
            round_number=self.round_number, max_rounds=self.max_rounds, done=self.done,
            agreement_reached=self.agreement, reward=j.total if j else 0.0,
            rigor_score=j.breakdown.rigor if j else 0.0, feasibility_score=j.breakdown.feasibility if j else 0.0,
            fidelity_score=j.breakdown.fidelity if j else 0.0,
        )

    def episode_log(self) -> EpisodeLog:
        if not self.done:
            raise RuntimeError("episode_log() is only available once the episode is done")
        s, j = self.scenario, self._judge()
        return trusted(
            EpisodeLog, episode_id=f"{s.template}-{s.difficulty}-{s.seed}", seed=s.seed, scenario_template=s.template,
            difficulty=s.difficulty, final_state=self.state(), transcript=list(self.history),
            reward_breakdown=j.breakdown, total_reward=j.total, rounds_used=self.rounds_used,
            agreement_reached=self.agreement, judge_notes=j.notes, verdict=j.verdict,
            reward_spec_version=REWARD_SPEC_VERSION, turns=list(self.turns), max_rounds=self.max_rounds,
            terminated=self.terminated, truncated=self.truncated, invalid_turns=dict(self.invalid),
            role_rewards=j.role_rewards(),
        )
