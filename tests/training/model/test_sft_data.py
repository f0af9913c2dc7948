"""Helpers over recorded transcripts (``training.model.sft_data``)."""

import json

from replicalab import generate_scenario
from replicalab.agents import SkilledScientist
from replicalab.agents.skilled import COUNTER_RATIONALE
from replicalab.lab import ScriptedLabManager
from replicalab.scenarios import cells
from replicalab.seeds import TRAIN_SEEDS
from training.model.sft_data import plan_before, record_episode


def test_plan_before_is_the_scientists_latest_own_protocol():
    checked = 0
    for template, difficulty in cells():
        for seed in TRAIN_SEEDS[:10]:
            lab = ScriptedLabManager(generate_scenario(seed, template, difficulty), "thrifty")
            examples, _, _ = record_episode(seed, template, difficulty, agent=SkilledScientist(("defend",)),
                                            lab_manager=lab)
            replies = [json.loads(e["completion"][0]["content"]) for e in examples]
            for k in range(1, len(replies)):
                plan = plan_before(examples, k)
                assert plan == [r for r in replies[:k] if "sample_size" in r][-1]
                if replies[k].get("rationale") == COUNTER_RATIONALE and k > 1:
                    assert plan["rationale"] == COUNTER_RATIONALE  # a second counter: the first is on the table
                    checked += 1
    assert checked > 0
