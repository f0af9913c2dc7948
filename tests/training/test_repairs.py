"""``training.bench.repairs``: a Lab Manager's suggestions applied to the plan on the table and put to the lab's
own check (what ``replicalab bench lab-manager`` reports as repairs)."""

from __future__ import annotations

from replicalab import ReplicaLabEnv, run_episode
from replicalab.agents import NaiveScientist
from replicalab.lab import LAB_POLICIES, ScriptedLabManager
from replicalab.models import LabManagerAction
from replicalab.scenarios import cells
from replicalab.seeds import VALIDATION_SEEDS
from training.bench.repairs import EMPTY_SLOT, tally

SEED = VALIDATION_SEEDS[0]


def test_the_scripted_labs_suggestions_repair_in_every_cell():
    env = ReplicaLabEnv()
    logs = [run_episode(env, NaiveScientist(), lab, seed=SEED, template=t, difficulty=d)
            for t, d in cells() for lab in LAB_POLICIES]
    counts, reasons = tally(logs)
    assert counts["repairs"] >= len(cells()) and counts["fails"] == 0 and not reasons


def test_a_move_to_another_technique_that_keeps_the_plans_items_fails_for_its_empty_slots():
    """The scripted lab's own moves, but each list of a suggestion that names a technique dropped (so the plan's
    items, another technique's, stay): such suggestions fail, most of them for an empty slot, which is named."""
    env, logs = ReplicaLabEnv(), []
    for t, d in cells():
        env.reset(SEED, t, d)
        honest = ScriptedLabManager(env.scenario, "thrifty", env.feasibility)

        def lab_manager(obs, honest=honest):
            action = honest(obs)
            if action.suggested_technique:
                return LabManagerAction(**{**action.model_dump(), "suggested_equipment": [],
                                           "suggested_reagents": []})
            return action

        logs.append(run_episode(env, NaiveScientist(), lab_manager, seed=SEED, template=t, difficulty=d))
    counts, reasons = tally(logs)
    assert counts["fails"] >= 1 and 2 * reasons[EMPTY_SLOT] > counts["fails"]
