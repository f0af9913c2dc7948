"""The gains table of ``replicalab eval`` (``training.eval.gains``) over the pairings of several evaluation outputs:
a cross-play matrix played in parts (the warm start's pairings once, each trained run's in its own evaluation).

    python benchmarks/crossplay_gains.py --baseline model:runs/WARM DIR [DIR ...] [--seat SEAT ...] [--plot PATH]

Each DIR is an ``out`` of ``replicalab eval`` (``report.json`` and ``episodes.jsonl``); all must have played the same
split and seeds.  A pairing found in two outputs is taken from the first.  Prints one markdown row per (seat,
opponent) with the seat's and the baseline's mean reward and the paired gain with its 95% interval; ``--seat``
keeps the rows of those seats only; ``--plot PATH`` draws them as the report's ``gains.png`` does.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main() -> int:
    from replicalab.models import EpisodeLog
    from training.eval.gains import played_in, seat_gains
    from training.eval.report_league import gains_figure, gains_lines

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dirs", nargs="+", type=Path, help="replicalab eval outputs (report.json, episodes.jsonl)")
    parser.add_argument("--baseline", required=True, help="the seat every other seat of its role is compared with")
    parser.add_argument("--seat", action="append", default=[], help="keep only this seat's rows (repeatable)")
    parser.add_argument("--samples", type=int, default=2000, help="bootstrap resamples")
    parser.add_argument("--plot", type=Path, default=None, help="also draw the rows as a PNG (as gains.png)")
    args = parser.parse_args()
    played: dict[tuple[str, str], list[EpisodeLog]] = {}
    design = None
    for out in args.dirs:
        if not (out / "report.json").is_file() or not (out / "episodes.jsonl").is_file():
            print(f"crossplay_gains: {out} is not a replicalab eval output (no report.json or episodes.jsonl)",
                  file=sys.stderr)
            return 2
        try:
            mine, pairs = played_in(out)
        except (ValueError, KeyError, TypeError) as exc:  # JSON or an EpisodeLog that does not read back
            print(f"crossplay_gains: {out} does not read back as a replicalab eval output: "
                  f"{type(exc).__name__}: {str(exc).splitlines()[0]}", file=sys.stderr)
            return 2
        if design is not None and mine != design:
            print(f"crossplay_gains: {out} played other seeds ({mine[0]}, {len(mine[1])} seeds) than {args.dirs[0]}",
                  file=sys.stderr)
            return 2
        design = mine
        for key, logs in pairs.items():
            played.setdefault(key, logs)
    table = seat_gains(played, args.baseline, args.samples)
    if not table:
        print(f"crossplay_gains: no seat to compare with {args.baseline} (is it spelled as in the evaluations?)",
              file=sys.stderr)
        return 2
    kept = {role: [r for r in rows if not args.seat or r["seat"] in args.seat] for role, rows in table.items()}
    print(f"{len(design[1])} seeds per cell of the {design[0]} split")
    report = {"gains": {role: rows for role, rows in kept.items() if rows}, "baseline": args.baseline}
    print("\n".join(gains_lines(report)))
    if args.plot is not None and report["gains"]:
        gains_figure(report).savefig(args.plot, dpi=120)
        print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
