"""Data contracts of ReplicaLab (the models map).

Every record that crosses a boundary -- an action, an observation, a step result, an episode log -- is
one of these pydantic models.  They are frozen and reject unknown fields unless noted.  Validation
errors say in plain words which rule was broken.

Fields beyond the seed contract are optional with defaults and are listed in each model's docstring.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from replicalab.model_rules import (
    _normalize_string_list,
    _strip,
    action_type_non_empty,
    check_lab_manager_action,
    check_scientist_action,
    message_non_empty,
    text_non_empty,
)

_FROZEN = ConfigDict(frozen=True, extra="forbid")
#: A side of the negotiation (a seat); ``replicalab.seats`` re-exports it with ``ROLES``.
AgentRole = Literal["scientist", "lab_manager"]
#: Who wrote a conversation entry: a role or the environment.
Speaker = Literal[AgentRole, "system"]


class ScientistActionType(str, Enum):
    PROPOSE_PROTOCOL = "propose_protocol"
    REVISE_PROTOCOL = "revise_protocol"
    REQUEST_INFO = "request_info"
    ACCEPT = "accept"


class LabManagerActionType(str, Enum):
    REPORT_FEASIBILITY = "report_feasibility"
    SUGGEST_ALTERNATIVE = "suggest_alternative"
    REJECT = "reject"
    ACCEPT = "accept"


class ScientistAction(BaseModel):
    """One Scientist turn.

    - propose_protocol / revise_protocol: sample_size >= 1, a technique and a rationale; no questions.
    - request_info: at least one question and no protocol payload (sample size, controls, technique,
      duration, equipment, reagents); a rationale may explain the question.
    - accept: no questions and no protocol payload.
    """

    model_config = _FROZEN

    action_type: ScientistActionType
    sample_size: int = Field(default=0, ge=0)
    controls: list[str] = Field(default_factory=list)
    technique: str = ""
    duration_days: int = Field(default=0, ge=0)
    required_equipment: list[str] = Field(default_factory=list)
    required_reagents: list[str] = Field(default_factory=list)
    questions: list[str] = Field(default_factory=list)
    rationale: str = ""

    _norm_lists = field_validator(
        "controls", "required_equipment", "required_reagents", "questions", mode="before"
    )(_normalize_string_list)
    _strip_text = field_validator("technique", "rationale", mode="before")(_strip)

    def has_protocol_payload(self) -> bool:
        return bool(
            self.sample_size or self.controls or self.technique or self.duration_days
            or self.required_equipment or self.required_reagents
        )

    @model_validator(mode="after")
    def _check_shape(self) -> "ScientistAction":
        check_scientist_action(self)
        return self


class LabManagerAction(BaseModel):
    """One Lab Manager turn.

    - feasible must equal budget_ok and equipment_ok and reagents_ok and schedule_ok and staff_ok.
    - accept needs feasible=True; reject needs feasible=False.
    - suggest_alternative needs feasible=False and at least one suggestion field.
    - Suggestion fields are allowed only on suggest_alternative.

    Fields beyond the seed contract: ``suggested_equipment``, ``suggested_reagents`` (replace the
    protocol's lists when non-empty) and ``suggested_duration_days`` (0 = no change), so that a
    suggestion can describe a complete alternative plan.
    """

    model_config = _FROZEN

    action_type: LabManagerActionType
    feasible: bool
    budget_ok: bool
    equipment_ok: bool
    reagents_ok: bool
    schedule_ok: bool
    staff_ok: bool
    suggested_technique: str = ""
    suggested_sample_size: int = Field(default=0, ge=0)
    suggested_controls: list[str] = Field(default_factory=list)
    explanation: str
    suggested_equipment: list[str] = Field(default_factory=list)
    suggested_reagents: list[str] = Field(default_factory=list)
    suggested_duration_days: int = Field(default=0, ge=0)

    _norm_lists = field_validator(
        "suggested_controls", "suggested_equipment", "suggested_reagents", mode="before"
    )(_normalize_string_list)
    _strip_text = field_validator("suggested_technique", "explanation", mode="before")(_strip)

    def has_suggestion(self) -> bool:
        return bool(
            self.suggested_technique or self.suggested_sample_size or self.suggested_controls
            or self.suggested_equipment or self.suggested_reagents or self.suggested_duration_days
        )

    @model_validator(mode="after")
    def _check_shape(self) -> "LabManagerAction":
        check_lab_manager_action(self)
        return self


class ConversationEntry(BaseModel):
    model_config = _FROZEN

    role: Speaker
    message: str
    round_number: int = Field(ge=0)
    action_type: Optional[str] = None

    _message_non_empty = field_validator("message")(message_non_empty)
    _action_type_non_empty = field_validator("action_type")(action_type_non_empty)


class Protocol(BaseModel):
    """The shared protocol payload used in observations and as the object of agreement."""

    model_config = _FROZEN

    sample_size: int = Field(ge=0)
    controls: list[str] = Field(default_factory=list)
    technique: str
    duration_days: int = Field(ge=0)
    required_equipment: list[str] = Field(default_factory=list)
    required_reagents: list[str] = Field(default_factory=list)
    rationale: str

    _norm_lists = field_validator(
        "controls", "required_equipment", "required_reagents", mode="before"
    )(_normalize_string_list)
    _strip_text = field_validator("technique", "rationale", mode="before")(_strip)
    _non_empty = field_validator("technique", "rationale")(text_non_empty)


class ScientistObservation(BaseModel):
    model_config = _FROZEN

    paper_title: str
    paper_hypothesis: str
    paper_method: str
    paper_key_finding: str
    experiment_goal: str
    conversation_history: list[ConversationEntry] = Field(default_factory=list)
    current_protocol: Optional[Protocol] = None
    round_number: int = Field(default=0, ge=0)
    max_rounds: int = Field(default=0, ge=0)


class LabTechnique(BaseModel):
    """A technique the lab runs (``LabManagerObservation.lab_techniques``): a plan using it needs one item of each
    slot (``equipment_slots``, ``reagent_slots``: the interchangeable options of each) and at least
    ``min_days`` days."""

    model_config = _FROZEN

    id: str
    equipment_slots: list[list[str]] = Field(default_factory=list)
    reagent_slots: list[list[str]] = Field(default_factory=list)
    min_days: int = Field(default=0, ge=0)


class LabManagerObservation(BaseModel):
    """The Lab Manager's view.

    Fields beyond the seed contract: ``control_costs`` (the flat cost of each control of the current
    protocol) and ``cost_per_sample`` (what one more sample of the current protocol costs), the prices
    the lab weighs when it pursues its own interest, the budget it keeps; ``plan_check``, the lab's own
    check of the current protocol (``replicalab.lab.check_feasibility``): for each of the five flags of a
    ``LabManagerAction`` (``budget_ok`` .. ``staff_ok``), the reasons the plan fails it, empty where it
    passes (safety folds into ``equipment_ok``, as in the flags); empty before any protocol; and
    ``lab_techniques``, the techniques the lab runs in its order of preference, each with the items it needs
    (the catalog a repair is made from).  The lab knows its own records (prices, staff rates, bookings,
    techniques), so its manager states the flags and writes its repairs from them.
    """

    model_config = _FROZEN

    budget_total: float = Field(ge=0)
    budget_remaining: float = Field(ge=0)
    equipment_available: list[str] = Field(default_factory=list)
    equipment_booked: list[str] = Field(default_factory=list)
    reagents_in_stock: list[str] = Field(default_factory=list)
    reagents_out_of_stock: list[str] = Field(default_factory=list)
    staff_count: int = Field(ge=0)
    time_limit_days: int = Field(ge=0)
    safety_restrictions: list[str] = Field(default_factory=list)
    conversation_history: list[ConversationEntry] = Field(default_factory=list)
    current_protocol: Optional[Protocol] = None
    round_number: int = Field(default=0, ge=0)
    max_rounds: int = Field(default=0, ge=0)
    control_costs: dict[str, float] = Field(default_factory=dict)
    cost_per_sample: float = Field(default=0.0, ge=0)
    plan_check: dict[str, list[str]] = Field(default_factory=dict)
    lab_techniques: list[LabTechnique] = Field(default_factory=list)


class Observation(BaseModel):
    """Each role receives its own view; the other field is None."""

    model_config = _FROZEN

    scientist: Optional[ScientistObservation] = None
    lab_manager: Optional[LabManagerObservation] = None


class RewardBreakdown(BaseModel):
    """Judge components.  rigor, feasibility and fidelity lie in [0, 1]; the rest is unbounded."""

    model_config = _FROZEN

    rigor: float = Field(default=0.0, ge=0.0, le=1.0)
    feasibility: float = Field(default=0.0, ge=0.0, le=1.0)
    fidelity: float = Field(default=0.0, ge=0.0, le=1.0)
    efficiency_bonus: float = 0.0
    communication_bonus: float = 0.0
    penalties: dict[str, float] = Field(default_factory=dict)


class StepInfo(BaseModel):
    """Metadata returned with each step.  Extra keys are allowed; the env adds ``terminated``,
    ``truncated``, ``invalid_turn``, ``total_reward`` and, at the end, ``role_rewards``."""

    model_config = ConfigDict(frozen=True, extra="allow")

    agreement_reached: bool = False
    error: Optional[str] = None
    reward_breakdown: Optional[RewardBreakdown] = None
    judge_notes: Optional[str] = None
    verdict: Optional[str] = None


class StepResult(BaseModel):
    model_config = _FROZEN

    observation: Optional[Observation] = None
    reward: float = 0.0
    done: bool = False
    info: StepInfo = Field(default_factory=StepInfo)


class InvalidAction(BaseModel):
    """Not in the seed contract: a turn whose output could not become a valid action (unparseable
    model text, a contract violation).  The env records it as an invalid, penalised turn."""

    model_config = _FROZEN

    role: AgentRole
    error: str
    raw_text: str = ""


class TurnRecord(BaseModel):
    """Not in the seed contract: one turn as it was submitted, enough to replay the episode.

    ``action`` holds the action's JSON-mode dump when the turn was a valid action; otherwise
    ``error`` says why the turn was invalid and ``raw_text`` keeps what the agent produced.
    """

    model_config = _FROZEN

    role: AgentRole
    round_number: int = Field(ge=0)
    action: Optional[dict[str, Any]] = None
    error: Optional[str] = None
    raw_text: str = ""


class EpisodeState(BaseModel):
    """Full internal state for debugging and replay.

    ``lab_equipment`` / ``lab_reagents`` hold the equipment free in the window and the reagents in stock.
    """

    model_config = _FROZEN

    seed: int = 0
    scenario_template: str = ""
    difficulty: str = "easy"
    paper_title: str = ""
    paper_hypothesis: str = ""
    paper_method: str = ""
    paper_key_finding: str = ""
    experiment_goal: str = ""
    lab_budget_total: float = 0.0
    lab_budget_remaining: float = 0.0
    lab_equipment: list[str] = Field(default_factory=list)
    lab_reagents: list[str] = Field(default_factory=list)
    lab_staff_count: int = 0
    lab_time_limit_days: int = 0
    current_protocol: Optional[Protocol] = None
    conversation_history: list[ConversationEntry] = Field(default_factory=list)
    round_number: int = 0
    max_rounds: int = 0
    done: bool = False
    agreement_reached: bool = False
    reward: float = 0.0
    rigor_score: float = 0.0
    feasibility_score: float = 0.0
    fidelity_score: float = 0.0


class EpisodeLog(BaseModel):
    """Completed episode record for logging, replay and evaluation.

    Fields beyond the seed contract: ``reward_spec_version`` (the judge formula this log was scored
    with), ``turns`` (every submitted turn, what ``replay_episode`` replays), ``max_rounds``,
    ``terminated`` / ``truncated`` (agreement or a hard stop vs running out of rounds),
    ``invalid_turns`` and ``role_rewards`` (each role's own reward: the Scientist's is ``total_reward``,
    the Lab Manager's weighs the agreed plan's core score against the budget it keeps; see
    ``replicalab.judge.constants``).
    """

    model_config = _FROZEN

    episode_id: str = ""
    seed: int = 0
    scenario_template: str = ""
    difficulty: str = "easy"
    final_state: Optional[EpisodeState] = None
    transcript: list[ConversationEntry] = Field(default_factory=list)
    reward_breakdown: Optional[RewardBreakdown] = None
    total_reward: float = 0.0
    rounds_used: int = 0
    agreement_reached: bool = False
    judge_notes: str = ""
    verdict: str = ""
    reward_spec_version: str = ""
    turns: list[TurnRecord] = Field(default_factory=list)
    max_rounds: int = 0
    terminated: bool = False
    truncated: bool = False
    invalid_turns: dict[str, int] = Field(default_factory=dict)
    role_rewards: dict[str, float] = Field(default_factory=dict)
