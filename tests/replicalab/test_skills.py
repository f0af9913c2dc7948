"""Something to learn in both seats: the Scientist's skills, the Lab Manager's interest, and how they are measured."""

import pytest

from replicalab import ReplicaLabEnv, generate_scenario, run_episode
from replicalab.agents import SKILLS, SkilledScientist, skills_name
from replicalab.judge import EpisodeFacts, judge
from replicalab.judge import constants as C
from replicalab.judge.components import lab_manager_reward
from replicalab.lab import ScriptedLabManager, check_feasibility
from replicalab.models import LabManagerAction, ScientistAction
from replicalab.seeds import VALIDATION_SEEDS
from replicalab.skill_values import brute_force, lab_matrix, skill_table

SEEDS = VALIDATION_SEEDS[:100]  # what ``replicalab bench skills`` plays by default
MIN_SKILL_VALUE = 0.5
MIN_LAB_MARGIN = 0.3


@pytest.fixture(scope="module")
def table():
    return skill_table(SEEDS)


@pytest.mark.slow  # plays the skill table's validation episodes (about 7 s)
@pytest.mark.parametrize("skill", SKILLS)
def test_each_skill_is_worth_half_a_point_alone_and_added_last(table, skill):
    assert table["alone"][skill].mean >= MIN_SKILL_VALUE, table["alone"][skill]
    assert table["last"][skill].mean >= MIN_SKILL_VALUE, table["last"][skill]
    assert table["alone"][skill].low > 0 and table["last"][skill].low > 0


@pytest.mark.slow  # the same table
def test_the_skilled_scientist_stays_well_above_naive(table):
    assert table["means"]["naive"].mean <= table["means"][skills_name(SKILLS)].mean - 3.0


@pytest.mark.slow
def test_the_labs_best_policy_depends_on_the_scientist():
    """Against the naive Scientist the thrifty lab earns more of its own reward; against the skilled one the
    cooperative lab does, each by a clear margin."""
    matrix = lab_matrix(SEEDS, ["naive", skills_name(SKILLS)])
    best, margin = matrix["best"]["naive"]
    assert best == "thrifty" and margin.mean >= MIN_LAB_MARGIN and margin.low > 0
    best, margin = matrix["best"][skills_name(SKILLS)]
    assert best == "cooperative" and margin.mean >= MIN_LAB_MARGIN and margin.low > 0


@pytest.mark.parametrize("difficulty", ["easy", "medium", "hard"])
def test_brute_force_is_a_ceiling_over_the_reference(difficulty):
    for seed in VALIDATION_SEEDS[:6]:
        scenario = generate_scenario(seed, "cell_biology", difficulty)
        facts = EpisodeFacts(agreement=True, rounds_used=C.FASTEST_AGREEMENT_ROUNDS, max_rounds=6)
        assert brute_force(seed, "cell_biology", difficulty, 6) >= judge(scenario.reference_protocol, scenario,
                                                                         facts).total - 1e-9


def _episode(skills, difficulty, seed, template="cell_biology", lab="thrifty"):
    return run_episode(ReplicaLabEnv(), SkilledScientist(skills), lab, seed=seed, template=template,
                       difficulty=difficulty)


def test_defend_opens_at_the_stated_minimum_and_counters_a_lowball():
    from replicalab.agents.brief import minimum_sample_size, published_protocol

    countered = 0
    for seed in VALIDATION_SEEDS[:30]:
        log = _episode(["defend"], "medium", seed)
        obs = ReplicaLabEnv().reset(seed, "cell_biology", "medium").scientist
        minimum, controls = minimum_sample_size(obs), published_protocol(obs)["controls"]
        assert minimum == generate_scenario(seed, "cell_biology", "medium").reference.min_sample_size
        mine = [t.action for t in log.turns if t.role == "scientist" and t.action.get("sample_size")]
        assert all(a["sample_size"] == minimum and set(controls) <= set(a["controls"]) for a in mine)
        countered += sum(a["action_type"] == "revise_protocol" for a in mine)
        assert log.final_state.current_protocol.sample_size >= minimum or log.rounds_used >= 4
    assert countered >= 5


def test_ask_learns_a_stand_in_only_by_asking():
    """The lab rarely volunteers a stand-in for an unusable item (only when no technique it prefers can run);
    the environment names stand-ins when asked, and the asker's revision swaps them in."""
    swapped = volunteered = moved = 0
    for seed in VALIDATION_SEEDS[:40]:
        for template in ("cell_biology", "ml_benchmark", "behavioral_psychology"):
            scenario = generate_scenario(seed, template, "medium")
            log = _episode(["ask"], "medium", seed, template, lab="cooperative")
            for before, entry in zip(log.transcript, log.transcript[1:]):
                if entry.role == "system" and entry.message.startswith("Lab records:"):
                    assert before.action_type == "request_info" and "What can replace" in before.message
            first = log.turns[1].action
            paper = scenario.paper_protocol
            usable = scenario.lab.equipment_available + scenario.lab.reagents_in_stock
            if first["action_type"] == "suggest_alternative" and any(
                    i not in usable for i in paper.required_equipment + paper.required_reagents):
                same = first["suggested_technique"] in ("", paper.technique)
                volunteered += same and bool(first["suggested_equipment"] or first["suggested_reagents"])
                moved += not same
            revisions = [t.action for t in log.turns if t.role == "scientist"
                         and (t.action or {}).get("action_type") == "revise_protocol"]
            swapped += bool(revisions) and log.reward_breakdown.fidelity > 0.8
    assert swapped >= 10 and moved >= 3 * volunteered


def test_every_skill_combination_is_a_scripted_scientist():
    from replicalab.agents import SCIENTIST_FACTORIES

    names = {skills_name(c) for c in [(s,) for s in SKILLS] + [("read", "defend"), ("read", "ask"),
                                                               ("defend", "ask"), SKILLS]}
    assert names <= set(SCIENTIST_FACTORIES) and len(names) == 7


def test_answers_come_from_the_environment_and_flags_must_be_true():
    env = ReplicaLabEnv()
    env.reset(3, "cell_biology", "medium")
    env.step(ScientistAction(action_type="request_info", questions=["What is the budget?"]))
    assert env.history[-1].role == "system" and env.history[-1].message.startswith("Lab records: budget:")
    env.step(LabManagerAction(action_type="report_feasibility", feasible=False, budget_ok=False, equipment_ok=False,
                              reagents_ok=False, schedule_ok=False, staff_ok=False, explanation="none yet"))
    scenario = env.scenario
    plan = scenario.reference_protocol
    env.step(ScientistAction(action_type="propose_protocol", rationale="r", **plan.model_dump(exclude={"rationale"})))
    assert check_feasibility(plan, scenario).ok
    lie = LabManagerAction(action_type="reject", feasible=False, budget_ok=False, equipment_ok=True, reagents_ok=True,
                           schedule_ok=True, staff_ok=True, explanation="Over budget.")
    result = env.step(lie)
    assert result.info.invalid_turn and "budget_ok is true" in result.info.error


def test_each_role_has_its_own_reward():
    log = _episode(SKILLS, "hard", VALIDATION_SEEDS[0])
    b = log.reward_breakdown
    core = C.CORE_SCALE * b.rigor * b.feasibility * b.fidelity
    state = log.final_state
    expected, _ = lab_manager_reward(core=core, agreement=log.agreement_reached,
                                     cost=state.lab_budget_total - state.lab_budget_remaining,
                                     budget=state.lab_budget_total, rounds_used=log.rounds_used, invalid_turns=0)
    assert log.role_rewards == {"scientist": log.total_reward, "lab_manager": pytest.approx(expected, abs=1e-5)}
    assert log.reward_spec_version == C.REWARD_SPEC_VERSION == "replicalab-judge/2.0"


def test_a_thrifty_suggestion_drops_the_costliest_control_and_cuts_the_sample():
    from replicalab.lab.manager import THRIFTY_SAMPLE_FRACTION

    for seed in VALIDATION_SEEDS[:20]:
        scenario = generate_scenario(seed, "ml_benchmark", "hard")
        obs = ReplicaLabEnv().reset(seed, "ml_benchmark", "hard")
        env = ReplicaLabEnv()
        env.reset(seed, "ml_benchmark", "hard")
        paper = scenario.paper_protocol
        lab_obs = env.step(ScientistAction(action_type="propose_protocol", rationale="r",
                                           **paper.model_dump(exclude={"rationale"}))).observation.lab_manager
        cooperative = ScriptedLabManager(scenario, "cooperative")(lab_obs)
        thrifty = ScriptedLabManager(scenario, "thrifty")(lab_obs)
        assert obs is not None and cooperative.action_type.value == thrifty.action_type.value == "suggest_alternative"
        costliest = max(paper.controls, key=lambda c: scenario.control_costs[c])
        assert costliest not in thrifty.suggested_controls and len(thrifty.suggested_controls) == len(paper.controls) - 1
        coop_n = cooperative.suggested_sample_size or paper.sample_size
        assert thrifty.suggested_sample_size == max(1, int(coop_n * THRIFTY_SAMPLE_FRACTION))
        assert lab_obs.control_costs == {c: scenario.control_costs[c] for c in paper.controls}


def test_a_per_chance_scientist_flips_a_seeded_coin_at_each_chance_and_a_per_turn_lab_mixes_moves() -> None:
    """``SkilledScientist(rate=...)`` is deterministic for its seed, uses a skill at some chances and declines it at
    others (rate 0: the naive play; rate 1: the all-skills play), and ``ScriptedLabManager(thrifty_rate=...)``
    plays both policies' moves across episodes, deterministically for its seed."""
    from replicalab import ReplicaLabEnv, generate_scenario, run_episode
    from replicalab.agents import SKILLS, SkilledScientist
    from replicalab.lab import ScriptedLabManager
    from replicalab.skill_use import skill_chances

    def play(seed, agent, lab=None):
        return run_episode(ReplicaLabEnv(), agent, lab, seed=seed, template="cell_biology", difficulty="hard")

    used = [c.used for s in range(30) for c in skill_chances(play(s, SkilledScientist(SKILLS, rate=0.5, seed=s)))]
    assert 0 < sum(used) < len(used)
    for s in range(5):
        twice = [play(s, SkilledScientist(SKILLS, rate=0.5, seed=9)) for _ in range(2)]
        assert twice[0] == twice[1]
        assert play(s, SkilledScientist(SKILLS, rate=1.0, seed=s)) == play(s, SkilledScientist(SKILLS))
        assert play(s, SkilledScientist(SKILLS, rate=0.0, seed=s)).total_reward == play(s, SkilledScientist()).total_reward
    policies = set()
    for s in range(20):
        lab = ScriptedLabManager(generate_scenario(s, "cell_biology", "medium"), thrifty_rate=0.5, seed=s)
        run_episode(ReplicaLabEnv(), SkilledScientist(), lab, seed=s, template="cell_biology", difficulty="medium")
        policies.add(lab.policy)
    assert policies == {"thrifty", "cooperative"}
    with pytest.raises(ValueError, match="rate"):
        SkilledScientist(SKILLS, rate=2.0)
