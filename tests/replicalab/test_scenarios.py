"""Scenario generation: determinism, variety, difficulty, solvability and bad input."""

import hashlib

import pytest

from replicalab import (
    DIFFICULTIES,
    TEMPLATES,
    TEST_SEEDS,
    TRAIN_SEEDS,
    generate_scenario,
)
from replicalab.lab import check_feasibility
from replicalab.lab.repair import _runnable, _usable
from replicalab.scenario_records import power_statement

CELLS = [(t, d) for t in TEMPLATES for d in DIFFICULTIES]
DISTINCT_TARGET = 10_000


def fingerprint(s) -> str:
    lab = s.lab
    parts = (s.paper_method, s.paper_title, repr(sorted(s.equipment_fees.items())),
             repr(sorted(s.reagent_costs.items())), repr(sorted(s.control_costs.items())), repr(lab),
             repr(s.reference), s.reference_protocol.model_dump_json())
    return hashlib.sha1("|".join(parts).encode()).hexdigest()


def test_at_least_three_templates_and_three_difficulties():
    assert len(TEMPLATES) >= 3 and DIFFICULTIES == ("easy", "medium", "hard")


@pytest.mark.slow  # 90,000 scenarios: about 14 s on 2 cores, too long for the edit loop
@pytest.mark.parametrize("template, difficulty", CELLS)
def test_ten_thousand_distinct_scenarios_per_cell(template, difficulty):
    prints = {fingerprint(generate_scenario(seed, template, difficulty)) for seed in range(DISTINCT_TARGET)}
    assert len(prints) == DISTINCT_TARGET


@pytest.mark.parametrize("template, difficulty", CELLS)
def test_same_seed_same_scenario(template, difficulty):
    assert fingerprint(generate_scenario(5, template, difficulty)) == fingerprint(generate_scenario(5, template, difficulty))
    assert fingerprint(generate_scenario(5, template, difficulty)) != fingerprint(generate_scenario(6, template, difficulty))


@pytest.mark.parametrize("template, difficulty", CELLS)
def test_difficulty_meaning_and_solvability(template, difficulty):
    for seed in TEST_SEEDS[:300]:
        s = generate_scenario(seed, template, difficulty)
        assert check_feasibility(s.reference_protocol, s).ok, (seed, check_feasibility(s.reference_protocol, s))
        paper = check_feasibility(s.paper_protocol, s)
        if difficulty == "easy":
            assert paper.ok
        else:
            assert not paper.ok
        if difficulty == "hard":  # the paper's technique cannot run here: a technique change is needed
            assert not _runnable(s.techniques[s.reference.core_technique], s, _usable(s))
            assert s.reference_protocol.technique != s.reference.core_technique


def test_hard_has_several_conflicts_and_tight_budget():
    conflicts, slack = [], []
    for seed in range(300):
        s = generate_scenario(seed, "cell_biology", "hard")
        conflicts.append(len(check_feasibility(s.paper_protocol, s).failed))
        slack.append(s.lab.budget_total / check_feasibility(s.reference_protocol, s).cost)
    assert sum(conflicts) / len(conflicts) >= 3
    assert sorted(slack)[len(slack) // 2] < 1.1  # the median reference plan uses >90% of the budget


def test_seed_splits_are_disjoint():
    assert not set(range(TRAIN_SEEDS.start, TRAIN_SEEDS.stop, 997)) & set(TEST_SEEDS)
    assert TRAIN_SEEDS.stop <= TEST_SEEDS.start or TEST_SEEDS.stop <= TRAIN_SEEDS.start


def test_bad_input_lists_valid_choices():
    with pytest.raises(ValueError, match="valid templates: cell_biology, ml_benchmark"):
        generate_scenario(0, "astrology", "easy")
    with pytest.raises(ValueError, match="valid difficulties: easy, medium, hard"):
        generate_scenario(0, "cell_biology", "nightmare")
    with pytest.raises(ValueError, match="non-negative"):
        generate_scenario(-1, "cell_biology", "easy")
    with pytest.raises(ValueError, match="integer"):
        generate_scenario("3", "cell_biology", "easy")


@pytest.mark.parametrize("template, difficulty", CELLS)
def test_brief_names_the_close_substitute_as_its_cross_check(template, difficulty):
    """The paper's cross-check method is the hidden reference's closest substitute technique, stated as what it
    changes in the published protocol (never a second complete protocol): applied, it gives the technique's
    canonical items plus the paper's critical items, the paper's sample size and controls, a duration the
    technique allows; where the paper's technique is blocked it is the technique the reference runs."""
    import json

    from replicalab.scenario_records import CROSS_CHECK_MARKER, PUBLISHED_MARKER
    from replicalab.agents.brief import CROSS_CHECK_RATIONALE, cross_check_method
    from replicalab.env import ReplicaLabEnv

    env = ReplicaLabEnv()
    for seed in TRAIN_SEEDS[:40]:
        obs = env.reset(seed, template, difficulty).scientist
        s = env.scenario
        method = cross_check_method(obs)
        costs = {t: c for t, c in s.reference.substitutes.items() if t != s.reference.core_technique}
        assert method["technique"] == min(costs, key=costs.get)
        technique = s.techniques[method["technique"]]
        assert sorted(method["required_equipment"]) == sorted(slot[0] for slot in technique.equipment_slots)
        critical = list(s.reference.critical_items)
        assert sorted(method["required_reagents"]) == sorted([slot[0] for slot in technique.reagent_slots] + critical)
        text = obs.paper_method
        stated = json.loads(text[text.index(CROSS_CHECK_MARKER) + len(CROSS_CHECK_MARKER):
                                 text.index(PUBLISHED_MARKER)].strip().removesuffix("."))
        assert not {"sample_size", "controls", "required_equipment", "required_reagents"} & set(stated)
        assert not set(stated["reagents"]["in"]) & set(s.paper_protocol.required_reagents)
        paper = s.paper_protocol
        assert (method["sample_size"], method["controls"]) == (paper.sample_size, paper.controls)
        assert method["duration_days"] == max(paper.duration_days, technique.min_days)
        if difficulty == "hard":
            assert s.reference_protocol.technique == method["technique"]


def test_brief_states_the_paper_protocol_in_canonical_names():
    from replicalab.agents.brief import published_protocol
    from replicalab.env import ReplicaLabEnv

    for t in TEMPLATES:
        env = ReplicaLabEnv()
        obs = env.reset(11, t, "medium").scientist
        p = env.scenario.paper_protocol
        brief = published_protocol(obs)
        assert brief["technique"] == p.technique and brief["sample_size"] == p.sample_size
        assert brief["required_reagents"] == p.required_reagents and brief["controls"] == p.controls


def test_reader_revises_to_the_cross_check_protocol_as_written():
    """The reader Scientist's one revision is the brief's cross-check protocol, field for field."""
    from replicalab.agents import SkilledScientist
    from replicalab.agents.brief import CROSS_CHECK_RATIONALE, cross_check_method
    from replicalab.env import ReplicaLabEnv
    from replicalab.episode import run_episode

    env = ReplicaLabEnv()
    revisions = 0
    for t in TEMPLATES:
        for seed in TRAIN_SEEDS[:20]:
            log = run_episode(env, SkilledScientist(["read"]), seed=seed, template=t, difficulty="hard")
            method = cross_check_method(env.reset(seed, t, "hard").scientist)
            for turn in log.turns:
                action = turn.action or {}
                if turn.role == "scientist" and action.get("action_type") == "revise_protocol":
                    revisions += 1
                    assert {k: action[k] for k in method} == method
                    assert action["rationale"] == CROSS_CHECK_RATIONALE
    assert revisions > 0


@pytest.mark.parametrize("template, difficulty", CELLS)
def test_the_key_finding_states_the_judges_minimum_in_prose_and_under_its_key(template, difficulty):
    import json

    for seed in TRAIN_SEEDS[:50]:
        s = generate_scenario(seed, template, difficulty)
        minimum = s.reference.min_sample_size
        prose, _, keyed = s.paper_key_finding.rpartition(": ")
        assert prose.endswith(f"at least {minimum} {prose.split()[-1]}")
        assert json.loads(keyed.removesuffix(".")) == {"sample_size": minimum}
        sentence, stated = power_statement(s.paper_key_finding)
        assert stated == minimum and s.paper_key_finding.endswith(sentence) and sentence.startswith("A power")


def test_power_statement_reads_only_the_whole_statement():
    assert power_statement('It worked. A power analysis for this effect calls for at least 7 mice: {"sample_size":7}.') \
        == ('A power analysis for this effect calls for at least 7 mice: {"sample_size":7}.', 7)
    for text in ("", "A power analysis for this effect calls for at least 7 mice.", "at least 7 mice"):
        assert power_statement(text) == ("", 0)
