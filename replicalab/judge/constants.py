"""Every number of the reward, in one place.  Bump REWARD_SPEC_VERSION when any of them changes.

The formula (the only place it is written down):

    core  = CORE_SCALE * rigor * feasibility * fidelity                     (0 .. 10)
    total = core + efficiency_bonus + communication_bonus - sum(penalties)  if both sides agreed
    total =                                              - sum(penalties)  otherwise
            (penalties then include ``no_agreement``)

rigor       = control coverage * min(1, n / minimum n) * EXTRA_CONTROL_DECAY ** (controls not required)
feasibility = 1 if every lab dimension passes, else FAILED_FEASIBILITY_CAP * passing dimensions / 6
fidelity    = technique factor * product of (1 - option cost) for stand-in items
              * (1 - DURATION_SHORTENING_COST * fraction of the paper's duration cut)
              * MISSING_CRITICAL_FACTOR ** (critical items missing) * MISSING_SLOT_FACTOR ** (empty slots)
efficiency  = EFFICIENCY_ROUNDS_MAX * unused rounds / (max_rounds - FASTEST_AGREEMENT_ROUNDS)
              + EFFICIENCY_BUDGET_MAX * unspent fraction of the budget, only for an agreed feasible plan
communication = COMMUNICATION_BONUS when the Scientist asked an answerable question and the plan is feasible
penalties   = no_agreement, invalid_turns (the Scientist's), hallucinated_items (unknown ids in any protocol
              put on the table), excess_questions (beyond QUESTION_LIMIT), verbose_rationales (Scientist
              rationales over RATIONALE_WORD_LIMIT words)

That total is the Scientist's reward.  The Lab Manager's own reward weighs the agreed plan against the
budget the lab keeps, with a cost per round beyond the fastest agreement:

    lab = LAB_CORE_WEIGHT * core + LAB_BUDGET_WEIGHT * unspent fraction of the budget
          - LAB_ROUND_COST * (rounds used - FASTEST_AGREEMENT_ROUNDS)  - lab penalties   if both sides agreed
    lab = - lab penalties                                                                otherwise
          (lab penalties: no_agreement, invalid_turns (the Lab Manager's))
"""

REWARD_SPEC_VERSION = "replicalab-judge/2.0"

CORE_SCALE = 10.0
EXTRA_CONTROL_DECAY = 0.85
FAILED_FEASIBILITY_CAP = 0.3
MISSING_CRITICAL_FACTOR = 0.0
MISSING_SLOT_FACTOR = 0.5
UNKNOWN_TECHNIQUE_FIDELITY = 0.0

DURATION_SHORTENING_COST = 0.3

EFFICIENCY_ROUNDS_MAX = 0.3
EFFICIENCY_BUDGET_MAX = 0.4
FASTEST_AGREEMENT_ROUNDS = 2
COMMUNICATION_BONUS = 0.1

NO_AGREEMENT_PENALTY = 2.0
INVALID_TURN_PENALTY = 0.5
HALLUCINATED_ITEM_PENALTY = 0.25
HALLUCINATION_PENALTY_CAP = 1.5
QUESTION_LIMIT = 4
EXCESS_QUESTION_PENALTY = 0.25
RATIONALE_WORD_LIMIT = 60
VERBOSE_RATIONALE_PENALTY = 0.5

LAB_CORE_WEIGHT = 0.2
LAB_BUDGET_WEIGHT = 8.0
LAB_ROUND_COST = 1.0
