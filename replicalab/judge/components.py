"""Named, pure score components.  Structured fields are matched by canonical id against the hidden
reference; free text (rationales, explanations) is never read."""

from __future__ import annotations

from replicalab.judge import constants as C
from replicalab.lab.feasibility import DIMENSIONS, FeasibilityReport
from replicalab.models import Protocol
from replicalab.scenario_records import Scenario, canonical_id


def rigor(protocol: Protocol, scenario: Scenario) -> tuple[float, str]:
    ref = scenario.reference
    listed = list(map(canonical_id, protocol.controls))
    required = set(ref.required_controls)
    covered = len(required.intersection(listed))
    extras = len(listed) - covered
    coverage = covered / len(required)
    sample = min(1.0, protocol.sample_size / ref.min_sample_size)
    score = coverage * sample * C.EXTRA_CONTROL_DECAY ** extras
    note = (
        f"rigor {score:.2f}: {covered}/{len(required)} required controls, {extras} extra or unknown controls, "
        f"sample size {protocol.sample_size} vs a minimum of {ref.min_sample_size}"
    )
    return score, note


def feasibility(report: FeasibilityReport) -> tuple[float, str]:
    if report.ok:
        return 1.0, "feasibility 1.00: the lab can run it"
    failed = report.failed
    passing = len(DIMENSIONS) - len(failed)
    score = C.FAILED_FEASIBILITY_CAP * passing / len(DIMENSIONS)
    return score, f"feasibility {score:.2f}: fails {', '.join(failed)}"


def fidelity(protocol: Protocol, scenario: Scenario) -> tuple[float, str]:
    ref = scenario.reference
    tech_id = canonical_id(protocol.technique)
    listed = set(map(canonical_id, protocol.required_equipment + protocol.required_reagents))
    notes = []
    if tech_id in ref.substitutes:
        score = 1.0 - ref.substitutes[tech_id]
        notes.append("the paper's technique" if tech_id == ref.core_technique else f"substitute technique {tech_id}")
    else:
        score = C.UNKNOWN_TECHNIQUE_FIDELITY
        notes.append(f"{tech_id} does not measure what the paper measured")
    technique = scenario.techniques.get(tech_id)
    if technique is not None:
        for slot in technique.equipment_slots + technique.reagent_slots:
            if slot[0] in listed:  # the slot's own first option: no cost
                continue
            chosen = next((o for o in slot if o in listed), None)
            if chosen is None:
                score *= C.MISSING_SLOT_FACTOR
                notes.append(f"no item for {slot[0]}")
            elif chosen != slot[0]:
                score *= 1.0 - ref.option_costs.get(chosen, 0.0)
                notes.append(f"{chosen} stands in for {slot[0]}")
    paper_days = scenario.paper_protocol.duration_days
    if protocol.duration_days < paper_days:
        cut = (paper_days - protocol.duration_days) / paper_days
        score *= 1.0 - C.DURATION_SHORTENING_COST * cut
        notes.append(f"duration cut from {paper_days} to {protocol.duration_days} days")
    missing = [c for c in ref.critical_items if c not in listed]
    if missing:
        score *= C.MISSING_CRITICAL_FACTOR ** len(missing)
        notes.append(f"missing critical items {', '.join(missing)}")
    return score, f"fidelity {score:.2f}: " + "; ".join(notes)


def efficiency_bonus(rounds_used: int, max_rounds: int, cost: float, budget: float, feasible: bool) -> float:
    if not feasible:
        return 0.0
    spare = max_rounds - max(rounds_used, C.FASTEST_AGREEMENT_ROUNDS)
    rounds = C.EFFICIENCY_ROUNDS_MAX * spare / max(1, max_rounds - C.FASTEST_AGREEMENT_ROUNDS)
    thrift = C.EFFICIENCY_BUDGET_MAX * max(0.0, 1.0 - cost / budget) if budget > 0 else 0.0
    return rounds + thrift


def communication_bonus(answerable_questions: int, feasible: bool) -> float:
    return C.COMMUNICATION_BONUS if feasible and answerable_questions > 0 else 0.0


def penalties(
    *, agreement: bool, invalid_turns: int, hallucinated: int, questions: int, verbose_rationales: int
) -> dict[str, float]:
    out: dict[str, float] = {}
    if not agreement:
        out["no_agreement"] = C.NO_AGREEMENT_PENALTY
    if invalid_turns:
        out["invalid_turns"] = C.INVALID_TURN_PENALTY * invalid_turns
    if hallucinated:
        out["hallucinated_items"] = min(C.HALLUCINATION_PENALTY_CAP, C.HALLUCINATED_ITEM_PENALTY * hallucinated)
    if questions > C.QUESTION_LIMIT:
        out["excess_questions"] = C.EXCESS_QUESTION_PENALTY * (questions - C.QUESTION_LIMIT)
    if verbose_rationales:
        out["verbose_rationales"] = C.VERBOSE_RATIONALE_PENALTY * verbose_rationales
    return out


def lab_manager_reward(
    *, core: float, agreement: bool, cost: float, budget: float, rounds_used: int, invalid_turns: int
) -> tuple[float, dict[str, float]]:
    """The Lab Manager's own reward and its terms (``constants`` writes the formula)."""
    terms: dict[str, float] = {}
    if agreement:
        terms["core"] = C.LAB_CORE_WEIGHT * core
        terms["budget_kept"] = C.LAB_BUDGET_WEIGHT * max(0.0, 1.0 - cost / budget) if budget > 0 else 0.0
        terms["rounds"] = -C.LAB_ROUND_COST * max(0, rounds_used - C.FASTEST_AGREEMENT_ROUNDS)
    else:
        terms["no_agreement"] = -C.NO_AGREEMENT_PENALTY
    if invalid_turns:
        terms["invalid_turns"] = -C.INVALID_TURN_PENALTY * invalid_turns
    return sum(terms.values()), terms
