"""``replicalab bench skills``: what each skill of the game is worth, on validation seeds.

Prints, from scripted agents on the same episodes (every template x difficulty x ``--episodes`` seeds):
the skill table (every combination of the Scientist's skills against the default Lab Manager; each skill's
value alone and added last, paired 95% intervals), the Lab Manager matrix (every scripted Lab Manager policy
x a row of Scientists, both roles' rewards, the lab's best policy per Scientist with its margin) and the
ceilings (the oracle Scientist and a brute-force search over the hidden scenario).  Needs only the core
install.
"""

from __future__ import annotations

import argparse

from replicalab.agents import SKILLS, skills_name
from replicalab.lab import DEFAULT_LAB_POLICY, LAB_POLICIES
from replicalab.scenarios import DIFFICULTIES, TEMPLATES
from replicalab.seeds import VALIDATION_SEEDS
from replicalab.skill_values import MATRIX_SCIENTISTS, ceilings, lab_matrix, skill_table
from training.argtypes import positive_int

DEFAULT_EPISODES = 100


def _skill_lines(table: dict, lab: str) -> list[str]:
    lines = [f"Skill table: Scientist reward against scripted:{lab}", "",
             "| skill | alone (vs naive) | added last (vs the other two) |", "|---|---|---|"]
    lines += [f"| {s} | {table['alone'][s]} | {table['last'][s]} |" for s in SKILLS]
    lines += ["", "| Scientist | mean reward [95% CI] |", "|---|---|"]
    lines += [f"| {name} | {e.mean:.2f} [{e.low:.2f}, {e.high:.2f}] |" for name, e in table["means"].items()]
    return lines


def _matrix_lines(matrix: dict) -> list[str]:
    head = "| Scientist | " + " | ".join(f"{lab}: lab / scientist / agree" for lab in LAB_POLICIES) + " | lab's best (margin) |"
    lines = ["Lab Manager matrix: mean rewards of both roles", "", head, "|---|" + "---|" * (len(LAB_POLICIES) + 1)]
    for name in MATRIX_SCIENTISTS:
        cells = [matrix["cells"][lab, name] for lab in LAB_POLICIES]
        best, margin = matrix["best"][name]
        lines.append(f"| {name} | " + " | ".join(
            f"{c['lab_manager'].mean:.2f} / {c['scientist'].mean:.2f} / {c['agreement']:.2f}" for c in cells)
            + f" | {best} ({margin}) |")
    return lines


def run(args: argparse.Namespace) -> int:
    seeds = VALIDATION_SEEDS[:args.episodes]
    episodes = args.episodes * len(TEMPLATES) * len(DIFFICULTIES)
    print(f"replicalab bench skills: validation seeds {seeds.start}..{seeds.stop - 1}, "
          f"{episodes} episodes per agent (every template x difficulty), paired by episode")
    table = skill_table(seeds, args.lab)
    print("\n".join(["", *_skill_lines(table, args.lab)]))
    naive, full = table["means"]["naive"], table["means"][skills_name(SKILLS)]
    print(f"\nall skills - naive: {full.mean - naive.mean:+.2f}")
    print("\n".join(["", *_matrix_lines(lab_matrix(seeds))]))
    top = ceilings(seeds, args.lab)
    print(f"\nCeilings against scripted:{args.lab}: oracle {top['oracle'].mean:.2f}, "
          f"brute-force search over the hidden scenario {top['brute_force'].mean:.2f}; "
          f"best visible-information Scientist ({skills_name(SKILLS)}) {full.mean:.2f}")
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--episodes", type=positive_int, default=DEFAULT_EPISODES,
                        help="validation seeds per template x difficulty (default %(default)s)")
    parser.add_argument("--lab", choices=LAB_POLICIES, default=DEFAULT_LAB_POLICY,
                        help="the Lab Manager of the skill table and the ceilings (default %(default)s)")
