"""The one scorer for training and evaluation: ``score_protocol`` (the breakdown) and ``judge``
(breakdown, total, verdict and plain-words notes)."""

from __future__ import annotations

from dataclasses import dataclass

from replicalab.judge import components
from replicalab.judge import constants as C
from replicalab.lab.feasibility import FeasibilityReport, check_feasibility
from replicalab.models import Protocol, RewardBreakdown
from replicalab.scenario_records import Scenario, canonical_id


@dataclass(frozen=True, slots=True)
class EpisodeFacts:
    """How the episode went, as far as the judge cares."""

    agreement: bool
    rounds_used: int
    max_rounds: int
    invalid_turns: int = 0  # the Scientist's
    lab_manager_invalid_turns: int = 0
    questions_asked: int = 0
    answerable_questions: int = 0
    hallucinated: tuple[str, ...] = ()  # unknown ids in any protocol put on the table
    verbose_rationales: int = 0


@dataclass(frozen=True, slots=True)
class Judgement:
    """The Scientist's breakdown and ``total``, the Lab Manager's ``lab_manager_total`` (its terms in
    ``lab_manager_terms``), the verdict and plain-words notes."""

    breakdown: RewardBreakdown
    total: float
    verdict: str
    notes: str
    lab_manager_total: float = 0.0
    lab_manager_terms: tuple[tuple[str, float], ...] = ()

    def role_rewards(self) -> dict[str, float]:
        return {"scientist": self.total, "lab_manager": self.lab_manager_total}


def unknown_ids(protocol: Protocol, scenario: Scenario) -> list[str]:
    """Technique, items and controls of ``protocol`` that the scenario's catalog does not know."""
    fees, costs = scenario.equipment_fees, scenario.reagent_costs  # the catalog: scenario.known_items()
    items = map(canonical_id, protocol.required_equipment + protocol.required_reagents)
    bad = [i for i in items if i not in fees and i not in costs]
    bad += [c for c in map(canonical_id, protocol.controls) if c not in scenario.control_costs]
    tech = canonical_id(protocol.technique)
    return bad + ([tech] if tech not in scenario.techniques else [])


def judge(protocol: Protocol | None, scenario: Scenario, facts: EpisodeFacts,
          report: FeasibilityReport | None = None) -> Judgement:
    """Score the final protocol (the agreed one, or the last on the table) of an episode.  ``report`` is
    ``check_feasibility(protocol, scenario)`` when the caller has it already (computed here when None)."""
    hallucinated = set(facts.hallucinated)
    if protocol is None:
        rig = fea = fid = cost = 0.0
        notes, feasible = ["no protocol was ever proposed"], False
    else:
        rig, n_rig = components.rigor(protocol, scenario)
        if report is None:
            report = check_feasibility(protocol, scenario)
        fea, n_fea = components.feasibility(report)
        fid, n_fid = components.fidelity(protocol, scenario)
        feasible, cost = report.ok, report.cost
        hallucinated.update(unknown_ids(protocol, scenario))
        notes = [n_rig, n_fea, n_fid]
    core = C.CORE_SCALE * rig * fea * fid
    ok = facts.agreement and feasible
    eff = components.efficiency_bonus(facts.rounds_used, facts.max_rounds, cost, scenario.lab.budget_total, ok)
    com = components.communication_bonus(facts.answerable_questions, ok)
    pens = components.penalties(
        agreement=facts.agreement, invalid_turns=facts.invalid_turns, hallucinated=len(hallucinated),
        questions=facts.questions_asked, verbose_rationales=facts.verbose_rationales,
    )
    total = (core + eff + com if facts.agreement else 0.0) - sum(pens.values())
    if hallucinated:
        notes.append(f"unknown ids: {', '.join(sorted(hallucinated))}")
    if pens:
        notes.append("penalties: " + ", ".join([f"{k} {v:.2f}" for k, v in pens.items()]))
    lab, lab_terms = components.lab_manager_reward(
        core=core, agreement=facts.agreement, cost=cost, budget=scenario.lab.budget_total,
        rounds_used=facts.rounds_used, invalid_turns=facts.lab_manager_invalid_turns,
    )
    notes.append("lab manager " + ", ".join([f"{k} {v:.2f}" for k, v in lab_terms.items()]) + f"; total {lab:.2f}")
    verdict = ("agreed_feasible" if feasible else "agreed_infeasible") if facts.agreement else "no_agreement"
    notes.insert(0, f"{verdict}: core {core:.2f} = 10 x {rig:.2f} x {fea:.2f} x {fid:.2f}; total {total:.2f}")
    breakdown = RewardBreakdown(
        rigor=round(rig, 6), feasibility=round(fea, 6), fidelity=round(fid, 6),
        efficiency_bonus=round(eff, 6), communication_bonus=round(com, 6), penalties=pens,
    )
    return Judgement(breakdown, round(total, 6), verdict, ". ".join(notes) + ".", round(lab, 6),
                     tuple([(k, round(v, 6)) for k, v in lab_terms.items()]))


def score_protocol(protocol: Protocol | None, scenario: Scenario, facts: EpisodeFacts) -> RewardBreakdown:
    return judge(protocol, scenario, facts).breakdown
