"""Whether a model's Lab Manager seat copies each of the lab's flags from the check in its prompt.

    python benchmarks/flag_copy.py [--model DIR ...] [--seeds 3]

On validation seeds (every template x difficulty), the Lab Manager's views of scripted episodes, each model scores
every flag teacher-forced (``training.eval.flag_copy``): per flag and value, the mean probability of the lab's value
and the share of views where the other is likelier.  A flag copied from the check reads 1.00 for both values.
"""

from __future__ import annotations

import argparse


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", action="append", default=None, help="checkpoint directory (repeatable; "
                        "default: the embedded default model)")
    parser.add_argument("--seeds", type=int, default=3, help="validation seeds per cell")
    args = parser.parse_args()

    from replicalab.seeds import VALIDATION_SEEDS
    from training.errors import UserInputError
    from training.model.default import resolve_default_model
    from training.model.model_path import check_model_path

    try:  # checked before anything plays: a bad one stops the script with one line
        paths = [check_model_path(name) for name in args.model or []] or [str(resolve_default_model())]
    except UserInputError as err:
        raise SystemExit(f"--model: {err}") from None
    from training.eval.flag_copy import LABS, SCIENTISTS, WRONG, flag_copy, flags

    seeds = list(VALIDATION_SEEDS[:args.seeds])
    print("Lab Manager views with a plan on the table (validation seeds x every cell; "
          f"{', '.join(SCIENTISTS)} x {', '.join(LABS)}): P(the lab's value | the true flags before it), "
          f"and the share of views where it is below {WRONG}")
    print("\n| model | " + " | ".join(f"{flag} {value}" for flag in flags() for value in ("true", "false")) + " |")
    print("|---" * (1 + 2 * len(flags())) + "|")
    for path in paths:
        rows = {(r.flag, r.value): r for r in flag_copy(path, seeds)}
        cells = [f"{r.mean_probability:.3f} ({r.wrong / r.views:.2f} of {r.views})" if (r := rows.get((flag, value)))
                 else "-" for flag in flags() for value in (True, False)]
        print(f"| {path} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
