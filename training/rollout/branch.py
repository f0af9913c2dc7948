"""Branch groups: G replies sampled from one decision state, each played to the end (``grpo.group_by: turn``).

A whole-episode group shares only its seed: its episodes split at the first sampled token, so a reward difference
inside it mixes every decision of every turn.  The environment is pure and replayable, so any turn of an episode
is a state to branch from: ``BranchCollector`` plays one *trunk* episode per group (the group's seed, role and
opponent), picks a decision turn of the trained role in it, and plays the group's G jobs from there: each replays
the trunk's model turns before that turn (``EpisodeJob.prefix``: the same tokens, so the same state), samples its
own reply at the decision and plays on with the live policy to the end.  The G replies share the state exactly,
and their rewards differ only through the reply and what follows it.

Which turn a group branches at (``choose_branch``): a *chance* of the trained role when the trunk has one (one
drawn in proportion to its kind's ``chance_weights``: 1 each by default), else (and with probability
``other_share`` even then) another turn of the role, uniformly.  A Scientist's chances are the turns at which a
skill's trigger shows (``replicalab.skill_use``), except the turn after a read, which is an ``AFTER_READ`` chance
(take what comes or send the cross-check again), and, where ``chance_weights`` names it, each turn right after the
lab accepted, a ``CLOSE`` chance (take the deal or play on); a Lab Manager's, the turns at which the lab's check
fails the current plan (``replicalab.lab_chances``), where a repair can pay and accepting cannot.  A trunk without a
chance branches at another of its turns, or (``borrow_chances``) its group borrows a chance of another trunk of its
role in the step, seed, scenario and opponent with it: every group then contrasts a decision that a skill or a
repair could take.  One branch point per trunk, so a step of ``groups_per_step`` groups plays
``groups_per_step`` trunks and trains on exactly ``groups_per_step * num_generations`` samples, each once.

Which tokens train: with ``reply_only`` a branch's trajectory is its branched reply alone (the prefix is its
prompt, the continuation is played for the reward and left out), so the advantage credits the decision that
differs inside the group; otherwise the continuation's turns train on the same advantage too.  With
``reply_temperature`` the branched reply (the only tokens that train) is sampled at that temperature and the
continuation at the rollouts': a decision explored at 1.0 while the copies around it stay at the sharper
temperature; the trainer scores at the reply's temperature, so the trained tokens are exactly on-policy.

The trunk collect and the branch collect use different sampling seeds, so no branch repeats its trunk.  Every
choice is a function of the collect's seed and the trunk, so a step (and a resumed step) branches the same way in
any process and on any number of workers.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Any, Mapping, Optional, Sequence

from replicalab.lab_chances import repair_chances
from replicalab.models import EpisodeLog
from replicalab.models import LabManagerActionType as LA
from replicalab.models import ScientistActionType as SA
from replicalab.skill_use import skill_chances
from training.rollout.records import EpisodeJob, RolloutRecord

#: ``EpisodeJob.branch`` of a group branched at a turn that is no chance of its role.
OTHER_TURN = "turn"
#: ``EpisodeJob.branch`` of a Lab Manager group branched where the lab's check fails the plan.
REPAIR = "repair"
#: ``EpisodeJob.branch`` of a Scientist group branched at its turn after a read, whatever the lab answered (it
#: took the read, or moved the plan elsewhere): take what comes, or send the cross-check again.
AFTER_READ = "after_read"
#: ``EpisodeJob.branch`` of a Scientist group branched at its turn right after the lab accepted the plan: take the
#: deal, or play on.  A chance only where ``chance_weights`` names it (elsewhere the turn is another turn, as ever).
CLOSE = "close"
#: The trunk collect's seed is the step's seed plus this (its turns never share a stream with the branches').
TRUNK_SEED_OFFSET = 7_777_777


@dataclass
class PendingBranches:
    """A submitted branch collect: the backend's pending handle, or the records of a backend that plays at once."""

    pending: Any = None
    records: Optional[list[RolloutRecord]] = None


def role_turns(record: RolloutRecord, role: str) -> int:
    """How many replies ``role``'s model seat generated in ``record``'s episode."""
    return sum(1 for turn in record.model_turns if turn.role == role)


def scientist_chances(log: EpisodeLog, close: bool = False) -> dict[int, str]:
    """{own turn: kind} of a Scientist's chances in ``log``: with ``close``, ``CLOSE`` at each turn right after
    the lab accepted; each skill's (``replicalab.skill_use``) over it, and ``AFTER_READ`` at the turn after a read,
    whichever skill's trigger shows there too (a lab that turns a read down mostly names an item it cannot use or
    cuts the plan: what comes after the read is the decision)."""
    found = skill_chances(log)
    chances = {turn: CLOSE for turn in closing_turns(log)} if close else {}
    chances.update((c.turn, c.skill) for c in found)
    chances.update((c.turn + 1, AFTER_READ) for c in found if c.skill == "read" and c.used)
    return chances


def closing_turns(log: EpisodeLog) -> dict[int, bool]:
    """{own turn: whether the Scientist took the deal there} of its turns (indices among them) that come right
    after a Lab Manager turn that accepted."""
    out, own, lab_accepted = {}, 0, False
    for turn in log.turns:
        if turn.role == "scientist":
            if lab_accepted:
                out[own] = (turn.action or {}).get("action_type") == SA.ACCEPT.value
            own += 1
        lab_accepted = turn.role == "lab_manager" and (turn.action or {}).get("action_type") == LA.ACCEPT.value
    return out


def _weighed_chances(trunk: RolloutRecord, n: int, chance_weights: Optional[Mapping[str, float]]
                     ) -> tuple[dict[int, str], dict[int, float], set[int]]:
    """(the chances a group may branch at, every chance's weight, the barred turns) of ``trunk``'s ``n`` turns of
    its role: a chance of a kind weighing 0 is barred, unless every turn would be."""
    if trunk.job.role == "scientist":
        close = CLOSE in (chance_weights or {})
        chances = {turn: kind for turn, kind in scientist_chances(trunk.log, close).items() if turn < n}
    else:
        chances = {turn: REPAIR for turn in repair_chances(trunk.log) if turn < n}
    weights = {turn: (chance_weights or {}).get(kind, 1.0) for turn, kind in chances.items()}
    barred = {turn for turn, weight in weights.items() if not weight}
    if len(barred) == n:  # every turn is a barred chance: the weights cannot choose
        barred = set()
    return {turn: kind for turn, kind in chances.items() if turn not in barred}, weights, barred


def holds_chance(trunk: RolloutRecord, chance_weights: Optional[Mapping[str, float]] = None) -> bool:
    """Whether ``trunk`` holds a chance of its role that ``chance_weights`` does not bar."""
    return bool(_weighed_chances(trunk, role_turns(trunk, trunk.job.role), chance_weights)[0])


def choose_branch(trunk: RolloutRecord, other_share: float, rng: random.Random,
                  chance_weights: Optional[Mapping[str, float]] = None) -> tuple[str, int]:
    """(kind, turn): where a group branches in ``trunk``: the index of one of the trained role's own turns, at a
    chance of the role (kind: the skill, ``AFTER_READ``, ``CLOSE`` or ``REPAIR``) or elsewhere (kind ``OTHER_TURN``).
    ``("", 0)`` when the trained seat generated nothing (the group is a whole-episode group).  Of the chances, one
    is drawn in proportion to its kind's ``chance_weights`` (a kind not named weighs 1); a kind weighing 0 is no
    branch point at all, unless the trunk has no other turn to branch at."""
    n = role_turns(trunk, trunk.job.role)
    if n == 0:
        return "", 0
    chances, weights, barred = _weighed_chances(trunk, n, chance_weights)
    others = [t for t in range(n) if t not in chances and t not in barred]
    if chances and (not others or rng.random() >= other_share):
        turns = sorted(chances)
        if len({weights[t] for t in turns}) == 1:  # equal weights draw as an unweighted choice does, stream and all
            turn = rng.choice(turns)
        else:
            turn = rng.choices(turns, weights=[weights[t] for t in turns])[0]
        return chances[turn], turn
    return OTHER_TURN, rng.choice(others)


def prefix_before(trunk: RolloutRecord, role: str, turn: int) -> tuple:
    """The trunk's model turns (of every model seat) before ``role``'s ``turn``-th reply."""
    seen = 0
    for index, model_turn in enumerate(trunk.model_turns):
        if model_turn.role == role:
            if seen == turn:
                return trunk.model_turns[:index]
            seen += 1
    raise ValueError(f"the trunk has no {role} turn {turn}")


def branch_turn(job: EpisodeJob) -> int:
    """The index, among the trained role's own turns, of the reply a branch job samples first."""
    return sum(1 for turn in job.prefix if turn.role == job.role)


def groups_of(jobs: Sequence[EpisodeJob]) -> list[list[EpisodeJob]]:
    """Consecutive jobs of the same ``group``."""
    out: list[list[EpisodeJob]] = []
    for job in jobs:
        if out and out[-1][0].group == job.group:
            out[-1].append(job)
        else:
            out.append([job])
    return out


class BranchCollector:
    """Plays a step's groups as branch groups on ``backend`` (any ``Backend``): ``collect`` (or ``submit`` then
    ``fetch``, for rollouts played ahead) returns one record per job, in job order, each a branch of its group's
    trunk.  The backend's other calls (weights, snapshots, validation) go to the backend itself."""

    def __init__(self, backend: Any, *, other_share: float, reply_only: bool,
                 reply_temperature: Optional[float] = None,
                 chance_weights: Optional[Mapping[str, float]] = None, borrow_chances: bool = False) -> None:
        self.backend, self.other_share, self.reply_only = backend, other_share, reply_only
        self.reply_temperature, self.chance_weights = reply_temperature, dict(chance_weights or {})
        #: A group whose trunk holds no chance branches at a chance of another trunk of its role in the step
        #: (drawn uniformly; its jobs take that trunk's seed, scenario and opponent) instead of at a turn of its own.
        self.borrow_chances = borrow_chances
        #: The trunks of the latest collect (what ``branch_metrics`` and the logs report beside the branches).
        self.last_trunks: list[RolloutRecord] = []

    @classmethod
    def from_config(cls, backend: Any, branch: Any) -> "BranchCollector":
        """The collector ``grpo.branch`` (a ``training.config.branch.BranchConfig``) describes, on ``backend``."""
        return cls(backend, other_share=branch.other_share, reply_only=branch.tokens == "reply",
                   reply_temperature=branch.temperature, chance_weights=branch.chance_weights,
                   borrow_chances=branch.without_chance == "borrow")

    def branch_jobs(self, jobs: Sequence[EpisodeJob], trunks: Sequence[RolloutRecord],
                    sampling_seed: Optional[int]) -> list[EpisodeJob]:
        groups = groups_of(jobs)
        holders = [k for k, trunk in enumerate(trunks) if holds_chance(trunk, self.chance_weights)
                   ] if self.borrow_chances else []
        out: list[EpisodeJob] = []
        for k, (group, trunk) in enumerate(zip(groups, trunks)):
            rng = random.Random(f"{sampling_seed}:{group[0].group}")
            lenders = [h for h in holders if trunks[h].job.role == trunk.job.role]
            if lenders and k not in holders:
                lender = rng.choice(lenders)
                trunk = trunks[lender]
                group = [replace(groups[lender][0], job_id=job.job_id, group=job.group) for job in group]
            kind, turn = choose_branch(trunk, self.other_share, rng, self.chance_weights)
            prefix = prefix_before(trunk, group[0].role, turn) if kind else ()
            out += [replace(job, prefix=prefix, branch=kind, reply_only=self.reply_only and bool(kind),
                            reply_temperature=self.reply_temperature if kind else None) for job in group]
        return out

    def submit(self, jobs: Sequence[EpisodeJob], *, sampling_seed: Optional[int] = None) -> PendingBranches:
        """Play the trunks now, then submit the branches (played at once on a backend without ``submit``)."""
        groups = groups_of(jobs)
        trunk_jobs = [replace(group[0], job_id=k) for k, group in enumerate(groups)]
        trunk_seed = None if sampling_seed is None else sampling_seed + TRUNK_SEED_OFFSET
        trunks = self.backend.collect(trunk_jobs, sampling_seed=trunk_seed) if trunk_jobs else []
        self.last_trunks = list(trunks)
        branches = self.branch_jobs(jobs, trunks, sampling_seed)
        pending = PendingBranches()
        if hasattr(self.backend, "submit"):
            pending.pending = self.backend.submit(branches, sampling_seed=sampling_seed)
        else:
            pending.records = self.backend.collect(branches, sampling_seed=sampling_seed)
        return pending

    def fetch(self, pending: PendingBranches) -> list[RolloutRecord]:
        if pending.records is None:
            pending.records = self.backend.fetch(pending.pending)
            pending.pending = None
        return pending.records

    def collect(self, jobs: Sequence[EpisodeJob], *, sampling_seed: Optional[int] = None) -> list[RolloutRecord]:
        return self.fetch(self.submit(jobs, sampling_seed=sampling_seed))


def used_at(record: RolloutRecord, skill: str, turn: int) -> Optional[bool]:
    """Whether the record's Scientist used ``skill`` at its own ``turn`` (None: no such chance there); at a
    ``CLOSE`` chance, whether it took the deal."""
    if skill == CLOSE:
        return closing_turns(record.log).get(turn)
    return next((c.used for c in skill_chances(record.log) if c.skill == skill and c.turn == turn), None)


def group_contrast(group: Sequence[RolloutRecord]) -> tuple[str, bool, Optional[bool]]:
    """(kind, rewards differ, holds both a used and an unused skill) of one group.  A branch group at a skill's
    chance compares the replies at that chance (at a ``CLOSE`` chance, a reply that took the deal and one that
    did not); a whole-episode group of Scientists holds both when some skill is
    used at a chance in one episode and not at a chance in another (any turn); None where no skill's chance
    shows."""
    kind = group[0].job.branch
    rewards = [r.trajectory.reward if r.trajectory is not None else r.log.total_reward for r in group]
    varied = max(rewards) - min(rewards) > 1e-9
    if kind == OTHER_TURN or group[0].job.role != "scientist":
        return kind, varied, None
    if kind:
        used = {used_at(r, kind, branch_turn(r.job)) for r in group} - {None}
        return kind, varied, used == {True, False} if used else None
    per_skill: dict[str, set] = {}
    for r in group:
        for c in skill_chances(r.log):
            per_skill.setdefault(c.skill, set()).add(c.used)
    if not per_skill:
        return kind, varied, None
    return kind, varied, any(seen == {True, False} for seen in per_skill.values())


def branch_metrics(records: Sequence[RolloutRecord]) -> dict[str, float]:
    """Per step: groups by kind (``branch/groups/<kind>``: ``episode``, a skill, ``turn``), the share of groups
    whose rewards differ (``branch/with_variance``), and the share of the groups at a skill's chance that hold
    both a used and an unused skill (``branch/both_used_and_unused``, over the groups where a chance shows)."""
    by_group: dict[int, list[RolloutRecord]] = {}
    for r in records:
        by_group.setdefault(r.job.group, []).append(r)
    kinds: dict[str, int] = {}
    varied = both = with_chance = 0
    for group in by_group.values():
        kind, differs, contrast = group_contrast(group)
        name = kind or "episode"
        kinds[name] = kinds.get(name, 0) + 1
        varied += differs
        if contrast is not None:
            with_chance += 1
            both += contrast
    n = max(len(by_group), 1)
    out = {f"branch/groups/{k}": float(v) for k, v in sorted(kinds.items())}
    out["branch/with_variance"] = varied / n
    out["branch/groups_at_a_chance"] = float(with_chance)
    if with_chance:
        out["branch/both_used_and_unused"] = both / with_chance
    return out
