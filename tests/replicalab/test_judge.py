"""The judge: baseline ordering, difficulty, and resistance to gaming."""

import statistics

import pytest
from gamers import GAMERS

from replicalab import (
    DIFFICULTIES,
    TEMPLATES,
    TEST_SEEDS,
    ReplicaLabEnv,
    generate_scenario,
    run_episode,
)
from replicalab.agents import (
    AdaptiveScientist,
    NaiveScientist,
    OracleScientist,
    RandomScientist,
    ReaderScientist,
)
from replicalab.judge import EpisodeFacts, judge
from replicalab.judge import constants as C

SEEDS = TEST_SEEDS[:120]
GAMING_SEEDS = TEST_SEEDS[5000:5080]


def _mean_reward(make, template, difficulty, seeds=SEEDS, core=False):
    env, out = ReplicaLabEnv(), []
    for seed in seeds:
        log = run_episode(env, make(seed, template, difficulty), seed=seed, template=template, difficulty=difficulty)
        b = log.reward_breakdown
        out.append(C.CORE_SCALE * b.rigor * b.feasibility * b.fidelity if core else log.total_reward)
    return statistics.mean(out)


naive = lambda seed, t, d: NaiveScientist()  # noqa: E731
adaptive = lambda seed, t, d: AdaptiveScientist()  # noqa: E731
oracle = lambda seed, t, d: OracleScientist(generate_scenario(seed, t, d))  # noqa: E731
rand = lambda seed, t, d: RandomScientist(seed)  # noqa: E731
reader = lambda seed, t, d: ReaderScientist()  # noqa: E731


@pytest.mark.parametrize("template", TEMPLATES)
def test_baselines_order_and_difficulty(template):
    naive_means = []
    for difficulty in DIFFICULTIES:
        o = _mean_reward(oracle, template, difficulty)
        a = _mean_reward(adaptive, template, difficulty)
        r = _mean_reward(rand, template, difficulty)
        assert _mean_reward(oracle, template, difficulty, core=True) >= 8.5
        assert o >= a >= r
        assert r <= 1.0
        naive_means.append(_mean_reward(naive, template, difficulty))
    easy, medium, hard = naive_means
    assert easy > medium > hard and hard <= easy / 2


@pytest.mark.parametrize("template", TEMPLATES)
def test_reading_the_brief_pays_only_where_the_technique_is_blocked(template):
    """The reader differs from the naive Scientist only when the lab moves a blocked technique: on hard
    cells its cross-check method scores far above the lab's preference, and no higher than the oracle."""
    for difficulty in ("easy", "medium"):
        assert _mean_reward(reader, template, difficulty) == pytest.approx(_mean_reward(naive, template, difficulty))
    n, r, o = (_mean_reward(make, template, "hard") for make in (naive, reader, oracle))
    assert r >= n + 3.0 and r <= o


@pytest.mark.parametrize("template, difficulty", [(t, d) for t in TEMPLATES for d in DIFFICULTIES])
def test_gaming_scores_below_the_adaptive_scientist(template, difficulty):
    honest = _mean_reward(adaptive, template, difficulty, GAMING_SEEDS)
    for name, gamer in GAMERS.items():
        gamed = _mean_reward(lambda seed, t, d: gamer(), template, difficulty, GAMING_SEEDS)
        assert gamed < honest, f"{name} scored {gamed:.2f} >= adaptive {honest:.2f}"


def test_free_text_is_never_read():
    s = generate_scenario(4, "behavioral_psychology", "medium")
    facts = EpisodeFacts(agreement=True, rounds_used=2, max_rounds=6)
    plain = judge(s.reference_protocol, s, facts)
    stuffed = s.reference_protocol.model_copy(update={"rationale": s.paper_method[:300]})
    assert judge(stuffed, s, facts).total == plain.total


def test_no_agreement_is_clearly_negative_and_feasibility_gates():
    s = generate_scenario(4, "cell_biology", "easy")
    ref = s.reference_protocol
    assert judge(ref, s, EpisodeFacts(agreement=False, rounds_used=6, max_rounds=6)).total <= -C.NO_AGREEMENT_PENALTY
    agreed = EpisodeFacts(agreement=True, rounds_used=2, max_rounds=6)
    broken = ref.model_copy(update={"sample_size": 10**6})
    j = judge(broken, s, agreed)
    assert j.breakdown.feasibility <= C.FAILED_FEASIBILITY_CAP and j.total < 3.5
    assert j.verdict == "agreed_infeasible" and "fails budget" in j.notes
