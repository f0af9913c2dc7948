"""The scripted Lab Managers: deterministic, truthful, grounded in the scenario's lab.

Two policies share one procedure and differ in what they suggest:

- ``cooperative`` suggests the lab's closest repair of an infeasible plan (``repair_plan``);
- ``thrifty`` pursues the lab's own interest, the budget it keeps (see ``lab_manager_reward``): it
  suggests the same repair made cheaper -- the costliest control dropped and the sample size cut to
  THRIFTY_SAMPLE_FRACTION -- and accepts whatever feasible plan the Scientist insists on.

The procedure, in order:
1. no protocol yet: report that;
2. a feasible protocol: accept it;
3. right after a question (the environment has answered it): report what fails, suggesting nothing, so
   the Scientist can use the answer;
4. otherwise suggest the policy's repair if it makes the plan feasible or fails fewer dimensions;
5. otherwise reject, saying exactly what fails (naming every item the lab cannot use).
It always emits a valid ``LabManagerAction`` whose flags are the lab's truth.
"""

from __future__ import annotations

import math
import random
from typing import Callable, Literal, Optional

from replicalab.lab.feasibility import Feasibility, FeasibilityReport
from replicalab.lab.repair import repair_plan
from replicalab.models import LabManagerAction, LabManagerObservation, Protocol
from replicalab.models import LabManagerActionType as LA
from replicalab.dialogue import apply_suggestion
from replicalab.scenario_records import Scenario, canonical_id
from replicalab.trusted import trusted

LabPolicy = Literal["cooperative", "thrifty"]
#: The thrifty lab's suggested sample size, as a share of its repair's.
THRIFTY_SAMPLE_FRACTION = 0.7

_NO_FLAGS = dict(budget_ok=False, equipment_ok=False, reagents_ok=False, schedule_ok=False, staff_ok=False)


def _ids(items: list[str]) -> list[str]:
    return list(map(canonical_id, items))


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
    if new.controls and _ids(new.controls) != _ids(old.controls):
        out["suggested_controls"] = new.controls
    if new.duration_days != old.duration_days:
        out["suggested_duration_days"] = new.duration_days
    if new.required_equipment and new.required_equipment != _ids(old.required_equipment):
        out["suggested_equipment"] = new.required_equipment
    if new.required_reagents and new.required_reagents != _ids(old.required_reagents):
        out["suggested_reagents"] = new.required_reagents
    return out


def thrifty_cut(plan: Protocol, scenario: Scenario) -> Protocol:
    """``plan`` made cheaper the thrifty lab's way: its costliest control dropped (when it has two or
    more) and its sample size cut to THRIFTY_SAMPLE_FRACTION (at least one)."""
    controls = _ids(plan.controls)
    if len(controls) > 1:
        costliest = max(controls, key=lambda c: (scenario.control_costs.get(c, 0.0), c))
        controls = [c for c in controls if c != costliest]
    return trusted(  # ``plan`` with two of its parts replaced by valid ones
        Protocol, sample_size=max(1, math.floor(plan.sample_size * THRIFTY_SAMPLE_FRACTION)), controls=controls,
        technique=plan.technique, duration_days=plan.duration_days, required_equipment=plan.required_equipment,
        required_reagents=plan.required_reagents, rationale=plan.rationale,
    )


class ScriptedLabManager:
    """Callable ``LabManagerObservation -> LabManagerAction`` for one scenario, playing ``policy``.

    ``feasibility`` is the lab's check for that scenario; pass the environment's
    (``ReplicaLabEnv.feasibility``) to share the plans it has already checked (a fresh one when None).
    """

    def __init__(self, scenario: Scenario, policy: LabPolicy = "thrifty", feasibility: Feasibility | None = None,
                 *, thrifty_rate: Optional[float] = None, seed: int = 0):
        if thrifty_rate is not None and not 0.0 <= thrifty_rate <= 1.0:
            raise ValueError(f"thrifty_rate must be within [0, 1], got {thrifty_rate}")
        if policy not in LAB_POLICIES:
            raise ValueError(f"unknown Lab Manager policy {policy!r}; valid: {', '.join(LAB_POLICIES)}")
        if feasibility is not None and feasibility.scenario is not scenario:
            raise ValueError("feasibility must check the Lab Manager's own scenario")
        self.scenario = scenario
        self.policy = policy
        self.feasibility = feasibility or Feasibility(scenario)
        #: With ``thrifty_rate`` the policy is drawn per turn (thrifty with that probability, else cooperative,
        #: from ``random.Random(seed)``) instead of fixed for the episode: the warm start's transcripts.
        self.thrifty_rate = thrifty_rate
        self.rng = random.Random(seed)

    def __call__(self, obs: LabManagerObservation) -> LabManagerAction:
        history = obs.conversation_history
        last_scientist = next((e for e in reversed(history) if e.role == "scientist"), None)
        asked = (last_scientist is not None and last_scientist.action_type == "request_info"
                 and history[-1].role != "lab_manager")
        protocol = obs.current_protocol
        if protocol is None:
            return LabManagerAction(
                action_type=LA.REPORT_FEASIBILITY, feasible=False, **_NO_FLAGS,
                explanation="No protocol has been proposed yet.",
            )
        report = self.feasibility(protocol)
        flags = report.flags()
        if report.ok:
            limit = self.scenario.lab.time_limit_days
            return LabManagerAction(
                action_type=LA.ACCEPT, feasible=True, **flags,
                explanation=f"Feasible: within the lab's budget and the time limit of {limit} days.",
            )
        if asked:
            return LabManagerAction(
                action_type=LA.REPORT_FEASIBILITY, feasible=False, **flags,
                explanation=f"The current plan fails: {_reasons(report)}.",
            )
        repaired = repair_plan(protocol, self.scenario)
        if self.thrifty_rate is not None:
            self.policy = "thrifty" if self.rng.random() < self.thrifty_rate else "cooperative"
        if repaired is not None and self.policy == "thrifty":
            repaired = thrifty_cut(repaired, self.scenario)
        changes = _changes(protocol, repaired) if repaired is not None else {}
        if changes:
            suggestion = LabManagerAction(
                action_type=LA.SUGGEST_ALTERNATIVE, feasible=False, **flags,
                explanation=f"Not feasible as proposed: {_reasons(report)}.", **changes,
            )
            after = self.feasibility(apply_suggestion(protocol, suggestion))
            if after.ok or len(after.failed) < len(report.failed):
                return suggestion
        return LabManagerAction(
            action_type=LA.REJECT, feasible=False, **flags,
            explanation=f"Not feasible and the lab has no alternative to offer: {_reasons(report)}.",
        )


#: Every scripted Lab Manager by name, as a factory ``scenario -> fresh agent``.
LAB_MANAGER_FACTORIES: dict[str, Callable[[Scenario], ScriptedLabManager]] = {
    "cooperative": lambda scenario: ScriptedLabManager(scenario, "cooperative"),
    "thrifty": lambda scenario: ScriptedLabManager(scenario, "thrifty"),
}
LAB_POLICIES: tuple[str, ...] = tuple(LAB_MANAGER_FACTORIES)
#: The Lab Manager that plain ``scripted`` (and ``lab_manager=None``) seats: the one with an interest of its own.
DEFAULT_LAB_POLICY: LabPolicy = "thrifty"
