"""``replicalab bench lab-manager``: whether a model speaks the game in the Lab Manager seat, on validation seeds.

The model plays the Lab Manager against each ``--scientist`` (scripted seats; by default the naive and the
all-skills Scientist) on every template x difficulty x ``--seeds`` validation seeds, ``--samples`` episodes each,
sampled at ``--temperature`` (1.0: the training temperature of the self-play config).  Per opponent, over the
model's turns:

- **parsed**: the reply is one JSON object that validates as a ``LabManagerAction`` (the seed contract's rules:
  ``feasible`` is the AND of the flags, accept needs feasible, ...);
- **true flags**: parsed, and its five flags are the lab's truth about the plan on the table (the environment
  rejects a turn whose flags are not: ``replicalab.env.UNTRUE_FLAGS``);
- **valid**: the environment accepted the turn;
- the mix of its moves (action types) over its valid turns, per turn, and the Lab Manager's own reward and the
  agreement rate next to the two scripted Lab Managers on the same episodes;
- **repairs**: the share of its suggestions that, applied to the plan on the table, pass the lab's own check
  (``training.bench.repairs``), with the number of suggestions; below the table, why the failing ones fail.

Targets (the self-play issue): at least 95% parsed and 95% true flags against each opponent.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import Counter

from training.argtypes import positive_float, positive_int

#: The Scientists the Lab Manager seat is measured against by default: the naive one and the all-skills one.
SCIENTISTS = ("scripted:naive", "scripted:reader+defender+asker")
#: Share of the model's turns that must parse, and state true flags, at the training temperature.
TARGET = 0.95
MOVES = ("accept", "suggest_alternative", "report_feasibility", "reject")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=None, help="checkpoint directory (default: the embedded default model)")
    parser.add_argument("--seeds", type=positive_int, default=5, help="validation seeds per cell")
    parser.add_argument("--samples", type=positive_int, default=2, help="sampled episodes per seed and cell")
    parser.add_argument("--temperature", type=positive_float, default=1.0)
    parser.add_argument("--constrained", action="store_true",
                        help="decode each reply under the Lab Manager's action grammar (rollout.sampling.constrained)")
    parser.add_argument("--scientist", action="append", default=None, metavar="SEAT",
                        help=f"scripted Scientist to play against (repeatable; default: {', '.join(SCIENTISTS)})")


def turn_counts(logs) -> Counter:
    """How the Lab Manager's turns of ``logs`` went: ``turns``, ``parsed``, ``true_flags``, ``valid`` and one count
    per move (action type) of the valid turns."""
    from replicalab.env import UNTRUE_FLAGS

    counts: Counter = Counter()
    for log in logs:
        for turn in log.turns:
            if turn.role != "lab_manager":
                continue
            counts["turns"] += 1
            if turn.action is None:
                continue
            counts["parsed"] += 1
            counts["true_flags"] += not (turn.error or "").startswith(UNTRUE_FLAGS)
            if turn.error is None:
                counts["valid"] += 1
                counts[turn.action["action_type"]] += 1
    return counts


def run(args: argparse.Namespace) -> int:
    import torch

    from replicalab import ReplicaLabEnv, run_episode
    from replicalab.lab import LAB_POLICIES
    from replicalab.metrics import role_reward
    from replicalab.scenarios import cells
    from replicalab.seats import SCRIPTED, parse_seat, scripted_agent
    from replicalab.seeds import VALIDATION_SEEDS
    from training.config.model import SamplingConfig
    from training.errors import UserInputError
    from training.model.default import resolve_default_model
    from training.model.model_path import check_model_path
    from training.bench.policy import play_logs, sampled_jobs
    from training.bench.repairs import tally
    from training.rollout.policy import PolicyModel

    scientists = args.scientist or list(SCIENTISTS)
    names = {}
    for spec in scientists:
        try:
            seat = parse_seat("scientist", spec, training=True)
        except ValueError as exc:
            raise UserInputError(f"--scientist: {exc}") from None
        if seat.kind != SCRIPTED:
            raise UserInputError(f"--scientist {spec}: give a scripted Scientist seat (scripted:NAME)")
        names[spec] = seat.arg
    seeds = list(VALIDATION_SEEDS[:args.seeds])
    grid = [(s, t, d) for t, d in cells() for s in seeds]
    path = check_model_path(args.model) if args.model else str(resolve_default_model())
    policy = PolicyModel(path, device="cpu")
    sampling = SamplingConfig(do_sample=True, temperature=args.temperature, seed=0, constrained=args.constrained)
    jobs = sampled_jobs(grid, args.samples, "lab_manager")
    print(f"replicalab bench lab-manager: {path}; validation seeds {seeds[0]}..{seeds[-1]} x every template x "
          f"difficulty; {args.samples} samples per episode at temperature {args.temperature}"
          f"{', constrained' if args.constrained else ''} ({len(jobs)} episodes "
          f"per Scientist); torch threads {torch.get_num_threads()}")
    header = ("| Scientist | turns | parsed | true flags | valid | " + " | ".join(MOVES)
              + " | repairs (of suggestions) | Lab Manager reward (model / thrifty / cooperative) | agreement (model) |")
    lines = ["", header, "|---" * header.count(" | ") + "|---|"]
    worst, failing = 1.0, []
    for spec in scientists:
        started = time.perf_counter()
        logs = play_logs(policy, jobs, scientist=spec, lab_manager="policy", sampling=sampling)
        name = names[spec]
        env = ReplicaLabEnv()
        scripted = {lab: [role_reward(run_episode(env, scripted_agent("scientist", name, s, t, d), lab, seed=s,
                                                  template=t, difficulty=d), "lab_manager") for s, t, d in grid]
                    for lab in LAB_POLICIES}
        c = turn_counts(logs)
        n, valid = max(1, c["turns"]), max(1, c["valid"])
        worst = min(worst, c["parsed"] / n, c["true_flags"] / n)
        own = statistics.fmean(role_reward(log, "lab_manager") for log in logs)
        repairs, reasons = tally(logs)
        offered = repairs["repairs"] + repairs["fails"]
        failing.append(f"{spec}: " + ("; ".join(f"{reason} {n / repairs['fails']:.2f}"
                                                for reason, n in reasons.most_common()) or "none"))
        lines.append(
            f"| {spec} | {c['turns']} | {c['parsed'] / n:.3f} | {c['true_flags'] / n:.3f} | {c['valid'] / n:.3f} | "
            + " | ".join(f"{c[m] / valid:.2f}" for m in MOVES)
            + f" | {repairs['repairs'] / max(offered, 1):.3f} ({offered})"
            + f" | {own:.2f} / {statistics.fmean(scripted['thrifty']):.2f} / {statistics.fmean(scripted['cooperative']):.2f}"
            f" | {statistics.fmean(float(log.agreement_reached) for log in logs):.3f} |")
        print(f"played {len(logs)} episodes against {spec} in {time.perf_counter() - started:.0f} s")
    print("\n".join(lines))
    print("\nWhy the failing suggestions fail (shares of them; a suggestion can fail on several counts):\n"
          + "\n".join(failing))
    print(f"\nparsed and true flags, the lower against any Scientist: {worst:.3f} (target {TARGET:.2f}: "
          f"{'met' if worst >= TARGET else 'not met'}); moves are shares of the valid turns")
    return 0
