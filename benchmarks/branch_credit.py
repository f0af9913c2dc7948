"""What a run's branch groups credited: each move's in-group advantage at a skill's chance and at other turns.

    python benchmarks/branch_credit.py runs/NAME [--role scientist] [--window 8]

A run with ``grpo.group_by: turn`` writes its branch episodes to ``episodes.jsonl``, ``num_generations`` consecutive
episodes a group, each replaying the same prefix and sampling its own reply at the branch turn. The branch turn is
the first turn of the role at which the group's actions differ (a group whose replies all agree holds no contrast
and is counted apart). For each kind of branch turn (a skill's chance, ``after_read``, ``close``: the Scientist's
turn right after the lab accepted, the lab's ``repair`` chance, or ``other``) and each move (the reply's action
type, marked when it used the chance's skill or, for a Lab Manager's suggestion, when it repairs:
``training.bench.repairs``; ``invalid`` for a reply the env refused), the script prints how often the move was
sampled there in the first and the last ``--window`` steps, its mean in-group advantage (its episode's reward minus
the group's mean), the sum of those advantages (what the gradient pushes, move by move, with ``grpo.scale_rewards:
none``) and their sum as GRPO's group scaling weighs them (divided by the group's reward std: ``scale_rewards:
group``, where a group whose replies differ by a little counts as much as one whose replies differ by a lot).
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path

from replicalab.models import EpisodeLog
from replicalab.lab_chances import repair_chances
from replicalab.skill_use import skill_chances
from training.bench.repairs import checked
from training.rollout.branch import REPAIR, scientist_chances

OTHER = "other"
INVALID = "invalid"
#: TRL's group scaling: advantage / (the group's sample std + this) (``grpo.scale_rewards: group``).
SCALE_EPS = 1e-4
#: Appended to a Scientist's move at a skill's chance when the reply used the skill (its content right).
USED = " (skill used)"
#: Appended to a Lab Manager's suggestion when, applied to the plan on the table, the lab's check passes it.
REPAIRS = " (repairs)"


def _moves(log: EpisodeLog, role: str) -> list[str]:
    return [INVALID if turn.error or not turn.action else str(turn.action.get("action_type", INVALID))
            for turn in log.turns if turn.role == role]


def _used(log: EpisodeLog, turn: int) -> bool:
    """Whether the Scientist's ``turn``-th reply used the skill whose chance it was."""
    return any(c.used for c in skill_chances(log) if c.turn == turn)


def _repairs(log: EpisodeLog, turn: int) -> bool:
    """Whether the Lab Manager's ``turn``-th reply is a suggestion that repairs."""
    return any(index == turn and report is not None and report.ok for index, _, report in checked(log))


def _mark(log: EpisodeLog, role: str, turn: int) -> str:
    """The mark of the ``role``'s ``turn``-th reply: the skill used, the repair made, or none."""
    if role == "scientist":
        return USED if _used(log, turn) else ""
    return REPAIRS if _repairs(log, turn) else ""


def _fingerprints(log: EpisodeLog, role: str) -> list[str]:
    return [json.dumps([turn.action, turn.raw_text], sort_keys=True) for turn in log.turns if turn.role == role]


def branch_rows(rows: list[dict], role: str, group_size: int) -> tuple[list[tuple], int]:
    """(step, kind, move, advantage, advantage scaled by the group's std) of every reply at its group's branch
    turn, and the number of groups without contrast."""
    out, flat = [], 0
    ordered = [row for row in rows if row["role"] == role]
    for start in range(0, len(ordered) - group_size + 1, group_size):
        group = ordered[start:start + group_size]
        logs = [EpisodeLog.model_validate(row["log"]) for row in group]
        if len({log.seed for log in logs}) != 1:
            raise SystemExit(f"episodes {start}..{start + group_size - 1} of {role} are not one group: "
                             f"pass the run's grpo.num_generations as --group-size")
        prints = [_fingerprints(log, role) for log in logs]
        turn = next((t for t in range(max(map(len, prints)))
                     if len({p[t] if t < len(p) else None for p in prints}) > 1), None)
        if turn is None:
            flat += 1
            continue
        chances = (scientist_chances(logs[0], close=True) if role == "scientist"
                   else dict.fromkeys(repair_chances(logs[0]), REPAIR))
        rewards = [log.role_rewards.get(role, log.total_reward) for log in logs]
        mean = sum(rewards) / len(rewards)
        std = statistics.stdev(rewards) + SCALE_EPS
        for log, reward in zip(logs, rewards):
            moves = _moves(log, role)
            if turn < len(moves):
                move = moves[turn] + _mark(log, role, turn)
                out.append((group[0]["step"], chances.get(turn, OTHER), move, reward - mean, (reward - mean) / std))
    return out, flat


def table(rows: list[tuple], window: int) -> list[str]:
    last = max(step for step, *_ in rows)
    stats: dict[tuple, list] = defaultdict(lambda: [0, 0, 0, 0.0, 0.0])
    totals: dict[tuple, int] = defaultdict(int)
    for step, kind, move, advantage, scaled in rows:
        s = stats[(kind, move)]
        early, late = step < window, step > last - window
        s[0] += early
        s[1] += late
        s[2] += 1
        s[3] += advantage
        s[4] += scaled
        totals[(kind, "early")] += early
        totals[(kind, "late")] += late
    lines = [f"| branch turn | move | share, first {window} steps | share, last {window} steps | replies | "
             "mean in-group advantage | summed advantage | summed scaled advantage |", "|---|---|---|---|---|---|---|---|"]
    for (kind, move), (early, late, n, adv, scaled) in sorted(stats.items()):
        share = lambda k, x: f"{x / totals[(kind, k)]:.2f}" if totals[(kind, k)] else "-"  # noqa: E731
        lines.append(f"| {kind} | {move} | {share('early', early)} | {share('late', late)} | {n} | {adv / n:+.2f} | "
                     f"{adv:+.1f} | {scaled:+.1f} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a run directory (runs/NAME) with episodes.jsonl")
    parser.add_argument("--role", default="scientist", choices=["scientist", "lab_manager"])
    parser.add_argument("--group-size", type=int, default=8, help="the run's grpo.num_generations")
    parser.add_argument("--window", type=int, default=8, help="steps at the start and the end to compare")
    args = parser.parse_args()
    path = args.run / "episodes.jsonl"
    if not path.is_file():
        raise SystemExit(f"no episodes.jsonl in {args.run}")
    rows = [json.loads(line) for line in path.open()]
    replies, flat = branch_rows(rows, args.role, args.group_size)
    if not replies:
        raise SystemExit(f"no {args.role} group in {path} holds two different replies")
    groups = sum(1 for row in rows if row["role"] == args.role) // args.group_size
    print(f"{args.run.name}, {args.role}: {groups} groups, {flat} with one reply")
    print("\n".join(table(replies, args.window)))


if __name__ == "__main__":
    main()
