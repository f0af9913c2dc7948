"""What a model Scientist's counters hold, and what the lab did next: whether the defend skill's counter can pay.

    python benchmarks/defend_counters.py DIR [--seat LABEL]

``DIR`` is a training run or an evaluation output (its ``episodes.jsonl``).  At each of the Scientist's defend
chances (``replicalab.skill_use``) the script sorts its move: accept, a question, a counter (the skill used: the
lab's suggestion with the brief's controls and at least the minimum sample size), or another revision, by the
technique it takes and whether its rationale is the counter's (the decision taken, the content not).  For each
counter it checks the numbers and items the scripted defender writes (the brief's minimum sample size, the
suggestion's days and items) and counts the lab's next move: a counter the lab does not accept costs a round and
gains nothing (``benchmarks/defend_parts.py``).  ``--seat`` keeps the episodes of one
label of an evaluation's ``episodes.jsonl`` (``AGENT`` or ``AGENT vs LAB``); a training run's Scientist rows are
labelled ``scientist``.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from replicalab.agents.brief import cross_check_method, minimum_sample_size, published_protocol, suggested_plan
from replicalab.agents.skilled import COUNTER_RATIONALE
from replicalab.episode import replayed_views
from replicalab.models import EpisodeLog
from replicalab.skill_use import skill_chances


def _move(action: dict, view, used: bool) -> str:
    if used:
        return "counter (skill used)"
    kind = action.get("action_type", "invalid")
    if kind != "revise_protocol":
        return kind
    technique, cross = action.get("technique"), cross_check_method(view)
    said = ", in the counter's words" if action.get("rationale") == COUNTER_RATIONALE else ""
    if technique == suggested_plan(view).get("technique"):
        return "revise: the suggestion's technique, short of a counter" + said
    if cross and technique == cross["technique"]:
        return "revise: the cross-check technique" + said
    return "revise: another technique" + said


def _counter(action: dict, view, lab_next: str) -> tuple[str, ...]:
    offer = suggested_plan(view)
    return ("sample size " + ("at the minimum" if action["sample_size"] == minimum_sample_size(view) else "above it"),
            "days " + ("the suggestion's" if action["duration_days"] == offer["duration_days"] else "other"),
            "items " + ("the suggestion's" if (action["required_equipment"], action["required_reagents"]) ==
                        (offer["required_equipment"], offer["required_reagents"]) else "other"),
            f"lab then {lab_next}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", type=Path, help="a training run or evaluation output directory")
    parser.add_argument("--seat", default=None, help="the episodes.jsonl label to keep (default: every Scientist)")
    args = parser.parse_args()
    path = args.dir / "episodes.jsonl"
    if not path.is_file():
        raise SystemExit(f"{args.dir} holds no episodes.jsonl: give a training run or an evaluation output")
    moves: Counter = Counter()
    counters: Counter = Counter()
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            if args.seat is not None and row.get("role") != args.seat or row.get("role") == "lab_manager":
                continue
            log = EpisodeLog.model_validate(row["log"])
            chances = [c for c in skill_chances(log) if c.skill == "defend"]
            if not chances:
                continue
            views = [(i, turn, view) for i, (turn, view) in enumerate(replayed_views(log)) if turn.role == "scientist"]
            for chance in chances:
                i, turn, view = views[chance.turn]
                action = turn.action or {}
                moves[_move(action, view, chance.used)] += 1
                if chance.used:
                    after = log.turns[i + 1].action if i + 1 < len(log.turns) else None
                    counters[_counter(action, view, (after or {}).get("action_type", "the end"))] += 1
    total = sum(moves.values())
    print(f"{args.dir}: {total} defend chances" + (f" of {args.seat}" if args.seat else ""))
    for move, n in moves.most_common():
        print(f"  {move}: {n} ({n / total:.2f})")
    print(f"\n{sum(counters.values())} counters, by what they hold and the lab's next move:")
    for key, n in counters.most_common():
        print(f"  {n:4d}  " + ", ".join(key))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
