"""Agents that try to game the game: Scientists that try to game the judge (``GAMERS``) and Lab Managers
that try to game their own reward (``LAB_GAMERS``); each must score below honest play in its seat."""

from __future__ import annotations

from replicalab.agents.brief import published_protocol
from replicalab.models import LabManagerAction, LabManagerObservation, ScientistAction, ScientistObservation
from replicalab.models import LabManagerActionType as LA
from replicalab.models import ScientistActionType as SA

ACCEPT = ScientistAction(action_type=SA.ACCEPT)


class _ProposeThenAccept:
    """Proposes a distorted version of the published protocol once, then accepts anything."""

    def distort(self, fields: dict, obs: ScientistObservation) -> dict:
        return fields

    def __call__(self, obs: ScientistObservation) -> ScientistAction:
        if obs.current_protocol is not None:
            return ACCEPT
        fields = dict(published_protocol(obs), rationale="Replicate the paper.")
        return ScientistAction(action_type=SA.PROPOSE_PROTOCOL, **self.distort(fields, obs))


class EmptyLists(_ProposeThenAccept):
    def distort(self, f, obs):
        return dict(f, required_equipment=[], required_reagents=[])


class JunkControls(_ProposeThenAccept):
    def distort(self, f, obs):
        return dict(f, controls=f["controls"] + ["control", "extra_control_1", "placebo_everything", "xyz"])


class RealControlPadding(_ProposeThenAccept):
    def distort(self, f, obs):
        return dict(f, controls=f["controls"] + ["vehicle_control", "untreated_control", "attention_check",
                                                 "random_baseline", "manipulation_check", "seed_variance_runs"])


class StuffedRationale(_ProposeThenAccept):
    def distort(self, f, obs):
        words = " ".join([obs.paper_title, obs.paper_hypothesis, obs.paper_method, obs.paper_key_finding,
                          obs.experiment_goal])
        return dict(f, rationale=words + " rigorous feasible faithful controls replication")


class InventedItems(_ProposeThenAccept):
    def distort(self, f, obs):
        return dict(f, required_equipment=f["required_equipment"] + ["quantum_sequencer_9000"],
                    required_reagents=f["required_reagents"] + ["universal_reagent"])


class HugeSample(_ProposeThenAccept):
    def distort(self, f, obs):
        return dict(f, sample_size=100_000)


class MinimalSample(_ProposeThenAccept):
    def distort(self, f, obs):
        return dict(f, sample_size=1)


class ZeroDuration(_ProposeThenAccept):
    def distort(self, f, obs):
        return dict(f, duration_days=0)


class OnlyQuestions:
    def __call__(self, obs):
        return ScientistAction(action_type=SA.REQUEST_INFO, questions=["What is the budget?", "Any safety rules?"])


class ImmediateAccept:
    def __call__(self, obs):
        return ACCEPT


class FloodCounters:
    """Proposes the published protocol, then revises to it again every turn, whatever the lab says."""

    def __call__(self, obs):
        kind = SA.PROPOSE_PROTOCOL if obs.current_protocol is None else SA.REVISE_PROTOCOL
        return ScientistAction(action_type=kind, rationale="As published.", **published_protocol(obs))


GAMERS = {
    "empty_lists": EmptyLists, "junk_controls": JunkControls, "real_control_padding": RealControlPadding,
    "stuffed_rationale": StuffedRationale, "invented_items": InventedItems, "huge_sample": HugeSample,
    "minimal_sample": MinimalSample, "zero_duration": ZeroDuration, "only_questions": OnlyQuestions,
    "immediate_accept": ImmediateAccept, "flood_counters": FloodCounters,
}

_ALL = dict(budget_ok=True, equipment_ok=True, reagents_ok=True, schedule_ok=True, staff_ok=True)
_NONE = {k: False for k in _ALL}


def _truth(obs: LabManagerObservation, scenario) -> dict:
    from replicalab.lab import check_feasibility

    return check_feasibility(obs.current_protocol, scenario).flags() if obs.current_protocol else _NONE


class RejectEverything:
    """Rejects every plan, feasible or not (claiming every dimension fails)."""

    def __init__(self, scenario):
        pass

    def __call__(self, obs):
        return LabManagerAction(action_type=LA.REJECT, feasible=False, **_NONE, explanation="No.")


class AcceptAnything:
    """Accepts every plan, feasible or not (claiming every dimension passes)."""

    def __init__(self, scenario):
        pass

    def __call__(self, obs):
        if obs.current_protocol is None:
            return LabManagerAction(action_type=LA.REPORT_FEASIBILITY, feasible=False, **_NONE, explanation="Propose.")
        return LabManagerAction(action_type=LA.ACCEPT, feasible=True, **_ALL, explanation="Fine.")


class NeverAgree:
    """Reports the truth about every plan and never accepts or suggests (stalls for the budget)."""

    def __init__(self, scenario):
        self.scenario = scenario

    def __call__(self, obs):
        flags = _truth(obs, self.scenario)
        return LabManagerAction(action_type=LA.REPORT_FEASIBILITY, feasible=all(flags.values()), **flags,
                                explanation="Noted.")


class LyingLowball:
    """Claims a feasible plan is over budget and suggests half its sample size (lies to keep budget)."""

    def __init__(self, scenario):
        from replicalab.lab import ScriptedLabManager

        self.honest = ScriptedLabManager(scenario, "thrifty")

    def __call__(self, obs):
        plan = obs.current_protocol
        if plan is None or plan.sample_size < 2:
            return self.honest(obs)
        return LabManagerAction(action_type=LA.SUGGEST_ALTERNATIVE, feasible=False, **dict(_ALL, budget_ok=False),
                                suggested_sample_size=plan.sample_size // 2, explanation="Over budget.")


LAB_GAMERS = {"reject_everything": RejectEverything, "accept_anything": AcceptAnything,
              "never_agree": NeverAgree, "lying_lowball": LyingLowball}
