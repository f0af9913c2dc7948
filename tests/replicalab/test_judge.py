"""The judge: baseline ordering, difficulty, and resistance to gaming."""

import statistics

import pytest
from gamers import GAMERS, LAB_GAMERS

from replicalab import (
    DIFFICULTIES,
    TEMPLATES,
    TEST_SEEDS,
    ReplicaLabEnv,
    generate_scenario,
    run_episode,
)
from replicalab.agents import (
    SCIENTIST_FACTORIES,
    SKILLS,
    NaiveScientist,
    OracleScientist,
    RandomScientist,
    SkilledScientist,
)
from replicalab.judge import EpisodeFacts, judge
from replicalab.judge import constants as C
from replicalab.lab import LAB_POLICIES, ScriptedLabManager

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
skilled = lambda seed, t, d: SkilledScientist(SKILLS)  # noqa: E731
oracle = lambda seed, t, d: OracleScientist(generate_scenario(seed, t, d))  # noqa: E731
rand = lambda seed, t, d: RandomScientist(seed)  # noqa: E731


@pytest.mark.slow
@pytest.mark.parametrize("template", TEMPLATES)
def test_baselines_order_and_difficulty(template):
    naive_means = []
    for difficulty in DIFFICULTIES:
        o = _mean_reward(oracle, template, difficulty)
        s = _mean_reward(skilled, template, difficulty)
        n = _mean_reward(naive, template, difficulty)
        r = _mean_reward(rand, template, difficulty)
        assert _mean_reward(oracle, template, difficulty, core=True) >= 8.5
        assert o >= n >= r and s >= n  # the skills never cost the naive play reward
        assert r <= 1.0
        naive_means.append(n)
    easy, medium, hard = naive_means
    assert easy > medium > hard and hard <= easy / 2


@pytest.mark.slow
@pytest.mark.parametrize("template, difficulty", [(t, d) for t in TEMPLATES for d in DIFFICULTIES])
def test_gaming_scores_below_honest_play(template, difficulty):
    """Every gaming Scientist scores below the honest Scientist that plays the game's skills, in every cell
    (``test_gaming_scores_below_the_naive_scientist`` compares them with the same play undistorted)."""
    honest = _mean_reward(lambda seed, t, d: SkilledScientist(SKILLS), template, difficulty, GAMING_SEEDS)
    for name, gamer in GAMERS.items():
        gamed = _mean_reward(lambda seed, t, d: gamer(), template, difficulty, GAMING_SEEDS)
        assert gamed < honest, f"{name} scored {gamed:.2f} >= the honest skilled Scientist {honest:.2f}"


@pytest.mark.slow
@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_gaming_scores_below_the_naive_scientist(difficulty):
    """A distortion of the naive Scientist's play (propose the published protocol, accept what comes)
    never pays: over every template, each gamer scores below the naive Scientist itself."""
    def mean(make):
        return statistics.fmean(_mean_reward(make, t, difficulty, GAMING_SEEDS) for t in TEMPLATES)

    honest = mean(naive)
    for name, gamer in GAMERS.items():
        gamed = mean(lambda seed, t, d: gamer())
        assert gamed < honest, f"{name} scored {gamed:.2f} >= naive {honest:.2f}"


@pytest.mark.slow
@pytest.mark.parametrize("scientist", ["naive", "reader+defender+asker"])
def test_lab_gaming_scores_below_honest_labs(scientist):
    """A Lab Manager that rejects everything, accepts anything, stalls or lies about the budget earns less
    of its own reward than either scripted Lab Manager, against the same Scientist on the same scenarios:
    never more on any difficulty, less over all (accepting anything is honest where every plan is feasible)."""
    env = ReplicaLabEnv()

    def means(make_lab) -> list[float]:
        return [statistics.fmean(
            run_episode(env, SCIENTIST_FACTORIES[scientist](s, t, d), make_lab(generate_scenario(s, t, d)),
                        seed=s, template=t, difficulty=d).role_rewards["lab_manager"]
            for t in TEMPLATES for s in GAMING_SEEDS[:30]) for d in DIFFICULTIES]

    honest = [min(cell) for cell in zip(*(means(lambda sc, p=p: ScriptedLabManager(sc, p)) for p in LAB_POLICIES))]
    for name, gamer in LAB_GAMERS.items():
        gamed = means(gamer)
        assert all(g <= h + 1e-9 for g, h in zip(gamed, honest)), f"{name} earned {gamed} vs the honest labs' {honest}"
        assert sum(gamed) < sum(honest), f"{name} earned {gamed} vs the honest labs' {honest}"


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
