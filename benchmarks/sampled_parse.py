"""How often a model's sampled turns parse, at the training temperature, in both seats: the warm start's
JSON under the sampling GRPO explores with.

    python benchmarks/sampled_parse.py [--model DIR ...] [--seeds 30] [--temperature 1.0] [--seed 0]

Each model plays the Scientist seat (vs the scripted Lab Manager) and the Lab Manager seat (vs the naive
Scientist), the seats of ``training.eval.seat_check``, on the first ``--seeds`` validation seeds x every template x
difficulty, sampled at ``--temperature`` (no top-k/top-p, the checkpoint's ``max_new_tokens``, torch seeded with
``--seed`` per generate call), through the rollouts' own ``play_jobs``.  Per model and seat: the parse rate of the model's
turns, the share of turns the env accepted, agreement, mean own reward, and *loops*: unparsed turns whose
text repeats one quoted item three or more times in a row (``"a","a","a"``), the copy's self-match.
"""

from __future__ import annotations

import argparse
import os
import re
import time

#: A quoted JSON string repeated at least three times in a row, with or without commas between.
LOOP = re.compile(r'("[^"]{1,80}")(?:,?\1){2,}')


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", nargs="+", default=None, help="model directories (default: the embedded default)")
    parser.add_argument("--seeds", type=int, default=30, help="validation seeds (x every template x difficulty)")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0, help="torch seed of each generate call")
    args = parser.parse_args()

    from replicalab import TEMPLATES
    from replicalab.scenarios import cells
    from replicalab.seeds import split_seeds
    from training.eval.seat_check import SEATS, seat_report
    from training.model.default import resolve_default_model
    from training.rollout.agent import greedy_for
    from training.rollout.play import play_jobs
    from training.rollout.policy import PolicyModel
    from training.rollout.records import episode_jobs

    seeds = list(split_seeds("validation", args.seeds))
    print(f"validation seeds {seeds[0]}..{seeds[-1]} x {len(cells(TEMPLATES))} cells, temperature {args.temperature}")
    print("| model | seat | episodes | model turns | parse rate | loops | valid turns | agreement | mean reward |")
    print("|---|---|---|---|---|---|---|---|---|")
    for path in args.model or [str(resolve_default_model())]:
        policy = PolicyModel(path)
        sampling = greedy_for(policy).model_copy(update={"do_sample": True, "temperature": args.temperature,
                                                         "seed": args.seed})
        for role, (scientist, lab_manager) in SEATS.items():
            started = time.perf_counter()
            jobs = episode_jobs(cells(TEMPLATES), seeds, role)
            records = [r for start in range(0, len(jobs), 64)
                       for r in play_jobs(policy, jobs[start:start + 64], scientist=scientist,
                                          lab_manager=lab_manager, sampling=sampling)]
            report = seat_report(role, records, "none", 0.0)
            loops = sum(bool(LOOP.search(t.raw_text)) for r in records for t in r.log.turns
                        if t.role == role and t.error and t.raw_text)
            print(f"| {path} | {role} | {report.episodes} | {report.model_turns} | {report.parse_rate:.1%} "
                  f"({report.parse_failures} failed) | {loops} | {report.valid_turn_rate:.1%} | "
                  f"{report.agreement_rate:.1%} | {report.mean_reward:.3f} |", flush=True)
            print(f"<!-- {time.perf_counter() - started:.0f}s -->", flush=True)


if __name__ == "__main__":
    main()
