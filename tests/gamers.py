"""Scientists that try to game the judge; each must score below the adaptive Scientist."""

from __future__ import annotations

from replicalab.agents.brief import published_protocol
from replicalab.models import ScientistAction, ScientistObservation
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


GAMERS = {
    "empty_lists": EmptyLists, "junk_controls": JunkControls, "real_control_padding": RealControlPadding,
    "stuffed_rationale": StuffedRationale, "invented_items": InventedItems, "huge_sample": HugeSample,
    "minimal_sample": MinimalSample, "zero_duration": ZeroDuration, "only_questions": OnlyQuestions,
    "immediate_accept": ImmediateAccept,
}
