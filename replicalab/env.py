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

from replicalab.env_records import (episode_log, episode_state, final_result, lab_manager_view, lab_techniques,
                                    scientist_view)
from replicalab.judge import EpisodeFacts, judge, unknown_ids
from replicalab.judge.constants import RATIONALE_WORD_LIMIT
from replicalab.lab.answers import ANSWERS_PREFIX, answer_questions
from replicalab.lab.feasibility import Feasibility, FeasibilityReport
from replicalab.models import (
    ConversationEntry,
    EpisodeLog,
    EpisodeState,
    InvalidAction,
    LabManagerAction,
    Observation,
    Protocol,
    ScientistAction,
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
from replicalab.dialogue import apply_suggestion, render_lab_manager, render_scientist
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


def _protocol(a: ScientistAction) -> Protocol:
    """The protocol a propose / revise action puts on the table."""
    return trusted(
        Protocol, sample_size=a.sample_size, controls=a.controls, technique=a.technique,
        duration_days=a.duration_days, required_equipment=a.required_equipment,
        required_reagents=a.required_reagents, rationale=a.rationale,
    )


def _turn_record(role: str, round_number: int, action: ScientistAction | LabManagerAction | InvalidAction,
                 error: str | None) -> TurnRecord:
    """The turn as it was submitted: the valid action's JSON dump, or the invalid turn's raw text."""
    invalid = isinstance(action, InvalidAction)
    return trusted(
        TurnRecord, role=role, round_number=round_number, action=None if invalid else _json_dump(action),
        error=error, raw_text=action.raw_text if invalid else "",
    )


def _check_role(action, role: str) -> None:
    """Raise (a caller bug) unless ``action`` is the acting ``role``'s: its action type or its InvalidAction."""
    expected = ScientistAction if role == "scientist" else LabManagerAction
    if isinstance(action, InvalidAction):
        if action.role != role:
            raise ValueError(f"it is the {role}'s turn, got an InvalidAction of the {action.role}")
    elif not isinstance(action, expected):
        raise ValueError(f"it is the {role}'s turn: expected {expected.__name__}, got {type(action).__name__}")


#: How the error of a Lab Manager turn whose flags are not the lab's truth begins.
UNTRUE_FLAGS = "flags that are not the lab's truth about the plan"


def _untrue_flags(a: LabManagerAction, truth: dict[str, bool]) -> str | None:
    """Why the flags of ``a`` are not the lab's ``truth`` about the plan (``FeasibilityReport.flags``), or None."""
    untrue = [] if _flags(a) == tuple(truth.values()) else [  # the usual case first: all true
        name for name, ok in truth.items() if getattr(a, name) != ok]
    if not untrue:
        return None
    return UNTRUE_FLAGS + ": " + ", ".join(
        f"{name} is {str(not getattr(a, name)).lower()}" for name in untrue)


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
        self.techniques = lab_techniques(self.scenario)  # the lab's catalog, the same in every Lab Manager view
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
        _check_role(action, role)
        self.scientist_turns += role == "scientist"
        error = None
        if isinstance(action, InvalidAction):
            error = action.error
        elif role == "scientist":
            error = self._scientist(action)
        else:
            error = self._lab_manager(action)
        self.turns.append(_turn_record(role, self.round_number, action, error))
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
            self._new_version(_protocol(a))
        self._say("scientist", render_scientist(a), kind.value)
        if answers is not None:
            self._say("system", ANSWERS_PREFIX + answers, None)
        return None

    def _lab_manager(self, a: LabManagerAction) -> str | None:
        kind = a.action_type
        if kind in (LA.ACCEPT, LA.SUGGEST_ALTERNATIVE) and self.protocol is None:
            return f"{kind.value} with no protocol on the table"
        if self.protocol is not None and (untrue := _untrue_flags(a, self._report().flags())) is not None:
            return untrue
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

    # ----- views -----------------------------------------------------------------------------
    def _observation(self) -> Observation | None:
        if self.done:
            return None
        if self.current_role == "scientist":
            return scientist_view(self.scenario, self.history, self.protocol, self.round_number, self.max_rounds)
        return lab_manager_view(self.scenario, self.history, self.protocol, self.round_number, self.max_rounds,
                                self._budget_remaining(), self._report() if self.protocol is not None else None,
                                self.techniques)

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
        return final_result(self._judge(), self.agreement, error, extra)

    def state(self) -> EpisodeState:
        if self.scenario is None:
            raise RuntimeError("call reset() before state()")
        j = self._judge() if self.done else None
        return episode_state(
            self.scenario, j, budget_remaining=self._budget_remaining(), protocol=self.protocol,
            history=self.history, round_number=self.round_number, max_rounds=self.max_rounds, done=self.done,
            agreement=self.agreement,
        )

    def episode_log(self) -> EpisodeLog:
        if not self.done:
            raise RuntimeError("episode_log() is only available once the episode is done")
        j = self._judge()
        return episode_log(
            self.scenario, j, self.state(), history=self.history, rounds_used=self.rounds_used,
            agreement=self.agreement, turns=self.turns, max_rounds=self.max_rounds, terminated=self.terminated,
            truncated=self.truncated, invalid_turns=self.invalid,
        )
