"""Where branch groups branch and what their metrics count, on scripted episodes (no model: fast)."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from replicalab import ReplicaLabEnv, run_episode
from replicalab.agents import SKILLS, SkilledScientist
from replicalab.skill_use import skill_chances
from replicalab.episode import replayed_views
from replicalab.models import ScientistAction
from training.rollout.branch import (
    AFTER_READ,
    CLOSE,
    OTHER_TURN,
    BranchCollector,
    branch_metrics,
    branch_turn,
    choose_branch,
    group_contrast,
    groups_of,
    prefix_before,
    scientist_chances,
    used_at,
)
from training.rollout.records import EpisodeJob, ModelTurn, RolloutRecord


def _record(seed: int, agent, job_id: int = 0, group: int = 0, **job) -> RolloutRecord:
    """A scripted episode dressed as a rollout record: one model turn per Scientist turn (the Lab Manager
    scripted)."""
    log = run_episode(ReplicaLabEnv(), agent, seed=seed, template="cell_biology", difficulty="hard")
    turns = tuple(ModelTurn("scientist", (seed, k), (-0.5, -0.5), "{}") for k, t in
                  enumerate(t for t in log.turns if t.role == "scientist"))
    base = EpisodeJob(job_id=job_id, seed=seed, template="cell_biology", difficulty="hard", role="scientist",
                      group=group)
    return RolloutRecord(job=replace(base, **job), log=log, trajectory=None, model_turns=turns)


def test_a_group_branches_at_a_chance_unless_it_draws_another_turn() -> None:
    with_chance = [r for r in (_record(s, SkilledScientist()) for s in range(20)) if skill_chances(r.log)]
    assert with_chance
    for trunk in with_chance:
        chances = {c.turn: c.skill for c in skill_chances(trunk.log)}
        for s in range(6):
            kind, turn = choose_branch(trunk, 0.0, random.Random(s))
            assert chances.get(turn) == kind
            prefix = prefix_before(trunk, "scientist", turn)
            assert len(prefix) == turn and prefix == trunk.model_turns[:turn]
        n = len(trunk.model_turns)
        if n > len(chances):
            kind, turn = choose_branch(trunk, 1.0, random.Random(0))
            assert kind == OTHER_TURN and turn not in chances
    assert choose_branch(replace(with_chance[0], model_turns=()), 0.0, random.Random(0)) == ("", 0)
    with pytest.raises(ValueError, match="no scientist turn 9"):
        prefix_before(with_chance[0], "scientist", 9)


def test_chance_weights_draw_chances_in_proportion_and_a_zero_weight_is_no_branch_point() -> None:
    """Without weights (or with equal ones) a group draws exactly as before; a kind weighed more is drawn in
    proportion; a kind weighing 0 is branched at neither as a chance nor as another turn."""
    trunks = [r for r in (_record(s, SkilledScientist(SKILLS)) for s in range(30))
              if len({c.skill for c in skill_chances(r.log)}) >= 2]
    assert trunks
    for trunk in trunks:
        chances = scientist_chances(trunk.log)
        kinds = sorted(set(chances.values()))
        for s in range(4):
            plain = choose_branch(trunk, 0.25, random.Random(s))
            assert choose_branch(trunk, 0.25, random.Random(s), {k: 3.0 for k in kinds}) == plain
        heavy, light = kinds[0], kinds[1]
        drawn = [choose_branch(trunk, 0.0, random.Random(s), {heavy: 9.0, light: 1.0})[0] for s in range(200)]
        share = drawn.count(heavy) / len(drawn)
        heavy_turns = sum(1 for k in chances.values() if k == heavy)
        expected = 9 * heavy_turns / (9 * heavy_turns + sum(1 for k in chances.values() if k != heavy))
        assert abs(share - expected) < 0.1, (share, expected)
        for s in range(30):
            kind, turn = choose_branch(trunk, 0.5, random.Random(s), {heavy: 0.0})
            assert kind != heavy and chances.get(turn) != heavy
    assert choose_branch(replace(trunks[0], model_turns=()), 0.0, random.Random(0), {"read": 0.0}) == ("", 0)


def test_the_turn_after_a_read_is_a_chance_of_its_own() -> None:
    """The Scientist's turn after its read, whatever the lab answered, is an ``after_read`` chance whichever
    skill's trigger shows there too: drawn like the others, weighed by its own weight, barred by a weight of 0."""
    trunks = [_record(s, SkilledScientist(["read"])) for s in range(30)]
    followed = [t for t in trunks if AFTER_READ in scientist_chances(t.log).values()]
    assert followed and all(AFTER_READ not in scientist_chances(_record(s, SkilledScientist()).log).values()
                            for s in range(10))
    for trunk in followed:
        chances = scientist_chances(trunk.log)
        read = next(c.turn for c in skill_chances(trunk.log) if c.skill == "read" and c.used)
        assert chances[read + 1] == AFTER_READ
        assert {t: k for t, k in chances.items() if t != read + 1} == {
            c.turn: c.skill for c in skill_chances(trunk.log) if c.turn != read + 1}
        own = [t.action for t in trunk.log.turns if t.role == "scientist"]
        assert own[read + 1]["action_type"] == "accept"  # the reader reads once, then takes what comes
        others = {"read": 0.0, "defend": 0.0, "ask": 0.0}
        for s in range(20):
            assert choose_branch(trunk, 0.0, random.Random(s), others) == (AFTER_READ, read + 1)
            assert choose_branch(trunk, 0.5, random.Random(s), {AFTER_READ: 0.0})[1] != read + 1
    assert any(read_turn + 1 in {c.turn for c in skill_chances(t.log)}
               for t in followed for read_turn in [next(c.turn for c in skill_chances(t.log) if c.used)])


class _PlaysOn:
    """A defender, except that the first time the lab has accepted it sends its plan again instead."""

    def __init__(self) -> None:
        self.defender, self.played_on = SkilledScientist(["defend"]), False

    def __call__(self, obs):
        action = self.defender(obs)
        if action.action_type.value == "accept" and not self.played_on:
            self.played_on = True
            return ScientistAction.model_validate({**obs.current_protocol.model_dump(), "action_type":
                                                   "revise_protocol", "rationale": "Once more.", "questions": []})
        return action


def test_the_turn_after_the_lab_accepted_is_a_close_chance_only_where_named() -> None:
    """Where ``chance_weights`` names ``close``, each Scientist turn whose view ends with the lab's accept is a
    chance of its own (a skill's chance over it) and ``used_at`` says whether it took the deal; unnamed, those
    turns are other turns and every draw is what it was."""
    trunks = [_record(s, agent) for s in range(12)
              for agent in (SkilledScientist(["defend"]), SkilledScientist(SKILLS))]
    closing = 0
    for trunk in trunks:
        views = [v for t, v in replayed_views(trunk.log) if t.role == "scientist"]
        accepted = {k for k, v in enumerate(views) if v.conversation_history
                    and v.conversation_history[-1].role == "lab_manager"
                    and v.conversation_history[-1].action_type == "accept"}
        skills = scientist_chances(trunk.log)
        assert CLOSE not in skills.values()
        assert scientist_chances(trunk.log, close=True) == {**{k: CLOSE for k in accepted}, **skills}
        closing += len(accepted)
        for k in accepted - set(skills):
            assert used_at(trunk, CLOSE, k) is True  # the scripted Scientists take the deal
        for s in range(8):
            assert choose_branch(trunk, 0.25, random.Random(s), {"read": 1.0}) == choose_branch(
                trunk, 0.25, random.Random(s))
            only_close = {CLOSE: 1.0, **{kind: 0.0 for kind in (*SKILLS, AFTER_READ)}}
            kind, turn = choose_branch(trunk, 0.0, random.Random(s), only_close)
            assert (kind == CLOSE) == bool(accepted - set(skills)) and (kind != CLOSE or turn in accepted)
    assert closing
    trunk = next(t for t in trunks[::2] if CLOSE in scientist_chances(t.log, close=True).values())  # a defender
    turn = next(k for k, kind in scientist_chances(trunk.log, close=True).items() if kind == CLOSE)
    branch = dict(prefix=prefix_before(trunk, "scientist", turn), branch=CLOSE, group=2)
    took = _record(trunk.job.seed, SkilledScientist(["defend"]), **branch)
    played_on = _record(trunk.job.seed, _PlaysOn(), **branch)
    assert used_at(played_on, CLOSE, turn) is False and used_at(took, CLOSE, turn + 1) is None
    assert group_contrast([took, took])[2] is False and group_contrast([took, played_on])[2] is True


def test_group_contrast_counts_a_used_and_an_unused_skill_at_the_same_chance() -> None:
    trunk = next(r for r in (_record(s, SkilledScientist()) for s in range(40))
                 if any(c.skill == "read" for c in skill_chances(r.log)))
    turn = next(c.turn for c in skill_chances(trunk.log) if c.skill == "read")
    prefix = prefix_before(trunk, "scientist", turn)
    branch = dict(prefix=prefix, branch="read", group=3)
    naive = _record(trunk.job.seed, SkilledScientist(), **branch)
    reader = _record(trunk.job.seed, SkilledScientist(["read"]), **branch)
    assert branch_turn(naive.job) == turn
    assert group_contrast([naive, naive])[2] is False
    assert group_contrast([naive, reader])[2] is True
    metrics = branch_metrics([naive, reader, _record(5, SkilledScientist(SKILLS), group=4)])
    assert metrics["branch/groups/read"] == 1 and metrics["branch/groups/episode"] == 1
    assert metrics["branch/both_used_and_unused"] > 0 and metrics["branch/groups_at_a_chance"] >= 1
    assert [len(g) for g in groups_of([naive.job, reader.job, replace(naive.job, group=4)])] == [2, 1]


def test_the_collector_branches_every_group_from_its_own_trunk_and_keeps_job_order() -> None:
    """With a stand-in backend that plays scripted episodes, each group's jobs carry its trunk's prefix, the
    trunks sample with another seed than the branches, and every job comes back once, in order."""

    class Scripted:
        def __init__(self):
            self.seeds = []

        def collect(self, jobs, *, sampling_seed=None):
            self.seeds.append(sampling_seed)
            return [_record(j.seed, SkilledScientist(), **{k: getattr(j, k) for k in (
                "job_id", "group", "prefix", "branch", "reply_only", "reply_temperature")}) for j in jobs]

    jobs = [EpisodeJob(job_id=g * 3 + k, seed=10 + g, template="cell_biology", difficulty="hard", role="scientist",
                       group=g) for g in range(3) for k in range(3)]
    backend = Scripted()
    records = BranchCollector(backend, other_share=0.0, reply_only=True, reply_temperature=1.0).collect(
        jobs, sampling_seed=7)
    assert [r.job.job_id for r in records] == [j.job_id for j in jobs]
    assert backend.seeds[1] == 7 and backend.seeds[0] != 7
    for group in groups_of([r.job for r in records]):
        assert len({j.prefix for j in group}) == 1 and len({j.branch for j in group}) == 1
        assert all(j.reply_only == bool(j.branch) and j.reply_temperature == (1.0 if j.branch else None)
                   for j in group)


def test_the_decision_explains_the_reward_variance_between_its_answers_only() -> None:
    from training.bench.groups import explained_share

    by_decision = [("read", True, 5.0, 0), ("read", True, 5.0, 0), ("read", False, 1.0, 0), ("read", False, 1.0, 0)]
    assert explained_share(by_decision) == pytest.approx(1.0)
    by_continuation = [("read", True, 5.0, 1), ("read", True, 1.0, 1), ("read", False, 5.0, 1), ("read", False, 1.0, 1)]
    assert explained_share(by_continuation) == pytest.approx(0.0)
    assert explained_share(by_decision + by_continuation) == pytest.approx(0.5)


def test_a_lab_manager_group_branches_where_the_lab_check_fails_the_plan() -> None:
    """A Lab Manager trunk branches at a repair chance (kind ``repair``) unless it draws another turn."""
    from replicalab.lab_chances import repair_chances
    from training.rollout.branch import REPAIR

    trunks = []
    for seed in range(20):
        log = run_episode(ReplicaLabEnv(), SkilledScientist(), seed=seed, template="cell_biology", difficulty="hard")
        turns = tuple(ModelTurn("lab_manager", (seed, k), (-0.5,), "{}") for k, t in
                      enumerate(t for t in log.turns if t.role == "lab_manager"))
        job = EpisodeJob(job_id=0, seed=seed, template="cell_biology", difficulty="hard", role="lab_manager", group=0)
        trunks.append(RolloutRecord(job=job, log=log, trajectory=None, model_turns=turns))
    with_chance = [t for t in trunks if repair_chances(t.log)]
    assert with_chance
    for trunk in with_chance:
        chances = set(repair_chances(trunk.log))
        for s in range(6):
            assert choose_branch(trunk, 0.0, random.Random(s)) in {(REPAIR, t) for t in chances}
        if len(trunk.model_turns) > len(chances):
            kind, turn = choose_branch(trunk, 1.0, random.Random(0))
            assert kind == OTHER_TURN and turn not in chances


def test_a_group_whose_trunk_holds_no_chance_borrows_another_trunks_chance() -> None:
    """With ``borrow_chances`` a group whose trunk holds no chance branches at a chance of another trunk of the
    step (its jobs take that trunk's seed, keep their own ids and group); without it, or when no trunk holds a
    chance, it branches at a turn of its own, exactly as before."""
    from training.rollout.branch import holds_chance

    read_only = {"defend": 0.0, "ask": 0.0}  # trunks whose chances are all ask's or defend's hold none
    trunks = [_record(s, SkilledScientist(SKILLS), job_id=k, group=k) for k, s in enumerate(range(12))]
    lenders = [t for t in trunks if holds_chance(t, read_only)]
    assert lenders and len(lenders) < len(trunks)
    jobs = [replace(t.job, job_id=t.job.group * 2 + k) for t in trunks for k in range(2)]
    plain = BranchCollector(None, other_share=0.0, reply_only=True, chance_weights=read_only).branch_jobs(
        jobs, trunks, 5)
    borrowing = BranchCollector(None, other_share=0.0, reply_only=True, chance_weights=read_only,
                                borrow_chances=True)
    branched = borrowing.branch_jobs(jobs, trunks, 5)
    assert [j.job_id for j in branched] == [j.job_id for j in jobs]
    assert [j.group for j in branched] == [j.group for j in jobs]
    for trunk, mine, before in zip(trunks, groups_of(branched), groups_of(plain)):
        if holds_chance(trunk, read_only):
            assert mine == before
            continue
        assert before[0].branch == OTHER_TURN and mine[0].branch in {"read", AFTER_READ}
        lender = next(t for t in lenders if t.job.seed == mine[0].seed)
        assert all(j.seed == lender.job.seed and j.prefix == mine[0].prefix for j in mine)
        turn = branch_turn(mine[0])
        assert scientist_chances(lender.log)[turn] == mine[0].branch
        assert mine[0].prefix == prefix_before(lender, "scientist", turn)
    barred = {"read": 0.0, "defend": 0.0, "ask": 0.0, AFTER_READ: 0.0}
    no_lender = BranchCollector(None, other_share=0.0, reply_only=True, chance_weights=barred,
                                borrow_chances=True)
    assert no_lender.branch_jobs(jobs, trunks, 5) == BranchCollector(
        None, other_share=0.0, reply_only=True, chance_weights=barred).branch_jobs(jobs, trunks, 5)
    from training.config.branch import BranchConfig

    assert BranchCollector.from_config(None, BranchConfig(without_chance="borrow")).borrow_chances
    assert not BranchCollector.from_config(None, BranchConfig()).borrow_chances
