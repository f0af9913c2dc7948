"""``ScriptedLabManager``: a deterministic Lab Manager grounded in the scenario's lab.

Policy, in order:
1. answer the Scientist's questions (if it asked) from the lab's facts;
2. no protocol yet: report that, with the answers;
3. a feasible protocol: accept it;
4. otherwise suggest the lab's repair if it makes the plan feasible or fails fewer dimensions;
5. otherwise reject, saying exactly what fails.
It always emits a valid ``LabManagerAction``.
"""

from __future__ import annotations

from replicalab.lab.answers import answer_questions
from replicalab.lab.feasibility import FeasibilityReport, check_feasibility
from replicalab.lab.repair import repair_plan
from replicalab.models import LabManagerAction, LabManagerObservation, Protocol
from replicalab.models import LabManagerActionType as LA
from replicalab.render import apply_suggestion, questions_in
from replicalab.scenario_records import Scenario, canonical_id

_NO_FLAGS = dict(budget_ok=False, equipment_ok=False, reagents_ok=False, schedule_ok=False, staff_ok=False)


def _ids(items: list[str]) -> list[str]:
    return [canonical_id(i) for i in items]


def _reasons(report: FeasibilityReport) -> str:
    return "; ".join(r for dim in report.failed for r in report.reasons[dim])


def _changes(old: Protocol, new: Protocol) -> dict:
    """The suggestion fields that turn ``old`` into ``new``.  A field can only replace a part of the
    plan with something non-empty (empty means "no change"), so a repair that drops every listed
    item of a kind (say, hallucinated equipment) is not expressible as a suggestion."""
    out: dict = {}
    if canonical_id(new.technique) != canonical_id(old.technique):
        out["suggested_technique"] = new.technique
    if new.sample_size != old.sample_size:
        out["suggested_sample_size"] = new.sample_size
    if new.duration_days != old.duration_days:
        out["suggested_duration_days"] = new.duration_days
    if new.required_equipment and new.required_equipment != _ids(old.required_equipment):
        out["suggested_equipment"] = new.required_equipment
    if new.required_reagents and new.required_reagents != _ids(old.required_reagents):
        out["suggested_reagents"] = new.required_reagents
    return out


class ScriptedLabManager:
    """Callable ``LabManagerObservation -> LabManagerAction`` for one scenario."""

    def __init__(self, scenario: Scenario):
        self.scenario = scenario

    def __call__(self, obs: LabManagerObservation) -> LabManagerAction:
        history = obs.conversation_history
        last = history[-1] if history and history[-1].role == "scientist" else None
        answers = ""
        if last is not None and last.action_type == "request_info":
            text, _ = answer_questions(questions_in(last.message), self.scenario)
            answers = f"Answers: {text}. "
        protocol = obs.current_protocol
        if protocol is None:
            return LabManagerAction(
                action_type=LA.REPORT_FEASIBILITY, feasible=False, **_NO_FLAGS,
                explanation=answers + "No protocol has been proposed yet.",
            )
        report = check_feasibility(protocol, self.scenario)
        flags = report.flags()
        if report.ok:
            limit = self.scenario.lab.time_limit_days
            return LabManagerAction(
                action_type=LA.ACCEPT, feasible=True, **flags,
                explanation=answers + f"Feasible: within the lab's budget and the time limit of {limit} days.",
            )
        if answers:
            return LabManagerAction(
                action_type=LA.REPORT_FEASIBILITY, feasible=False, **flags,
                explanation=answers + f"The current plan fails: {_reasons(report)}.",
            )
        repaired = repair_plan(protocol, self.scenario)
        changes = _changes(protocol, repaired) if repaired is not None else {}
        if changes:
            suggestion = LabManagerAction(
                action_type=LA.SUGGEST_ALTERNATIVE, feasible=False, **flags,
                explanation=f"Not feasible as proposed: {_reasons(report)}.", **changes,
            )
            after = check_feasibility(apply_suggestion(protocol, suggestion), self.scenario)
            if after.ok or len(after.failed) < len(report.failed):
                return suggestion
        return LabManagerAction(
            action_type=LA.REJECT, feasible=False, **flags,
            explanation=f"Not feasible and the lab has no alternative to offer: {_reasons(report)}.",
        )
