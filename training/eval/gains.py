"""What each trained seat of ``replicalab eval`` gains over a baseline seat of its role (its warm start, say),
opponent by opponent, on paired episodes.

For the baseline seat of a role and every other non-scripted seat of that role, and each opponent (a seat of the
other role) that both played:

- **Gain**: the seat's own reward (``replicalab.metrics.role_reward``) minus the baseline's own reward against
  that opponent on the same episode, averaged over the episodes both played, with a ``CI_LEVEL`` bootstrap
  interval (episodes resampled within each template x difficulty cell, ``training.eval.exploitability.summary``).
- **Apart**: the interval lies wholly above zero (``above``), wholly below (``below``), or holds it (``no``).

Both seats face the same opponent on the same seeds, so the gain is paired: scenario-to-scenario variation
cancels, and what is left is the seats' difference and their sampling.  A role whose baseline did not play, or
has no other non-scripted seat, has no entry.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from replicalab.models import EpisodeLog
from replicalab.seats import ROLES
from training.eval.exploitability import is_scripted, summary
from training.eval.league import VS, Played, seat_rewards

#: ``apart`` of a gain: its interval above zero, below zero, or holding zero.
ABOVE, BELOW, NOT_APART = "above", "below", "no"


def apart(ci: list[float]) -> str:
    return ABOVE if ci[0] > 0 else BELOW if ci[1] < 0 else NOT_APART


def seat_gains(played: Played, baseline: str, samples: int = 2000) -> dict[str, list[dict[str, Any]]]:
    """``{role: one row per (seat, opponent)}``; a row holds ``seat``, ``opponent``, ``seat_reward`` and
    ``baseline_reward`` (their means on the shared episodes), ``gain`` (mean and ``ci95``), ``apart`` and
    ``episodes``, in the order the seats and opponents were first played."""
    out: dict[str, list[dict[str, Any]]] = {}
    for role in ROLES:
        mine = seat_rewards(played, role)  # (seat, opponent) -> episode -> the seat's own reward
        seats, opponents = (list(dict.fromkeys(pair[i] for pair in mine)) for i in (0, 1))  # in order first played
        if baseline not in seats:
            continue
        rows = []
        for seat in seats:
            if seat == baseline or is_scripted(seat):
                continue
            for opponent in opponents:
                a, b = mine.get((seat, opponent)), mine.get((baseline, opponent))
                shared = sorted(set(a) & set(b)) if a and b else []
                if not shared:
                    continue
                gain = summary({e: a[e] - b[e] for e in shared}, samples)
                rows.append({"seat": seat, "opponent": opponent,
                             "seat_reward": statistics.fmean(a[e] for e in shared),
                             "baseline_reward": statistics.fmean(b[e] for e in shared),
                             "gain": gain, "apart": apart(gain["ci95"]), "episodes": len(shared)})
        if rows:
            out[role] = rows
    return out


def played_in(out: Path) -> tuple[tuple[str, tuple[int, ...]], dict[tuple[str, str], list[EpisodeLog]]]:
    """The (split, seeds) and the pairings, (Lab Manager, agent) -> EpisodeLogs, of one ``replicalab eval`` output
    (its ``report.json`` and ``episodes.jsonl``, each episode labelled as ``training.eval.league.pairing_label``
    says; the oracle, a reference, is left out unless it is an agent)."""
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    first, others = report["lab_managers"][0], report["lab_managers"][1:]
    played: dict[tuple[str, str], list[EpisodeLog]] = {}
    with (out / "episodes.jsonl").open(encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            label = row["role"]
            lab = next((o for o in others if label.endswith(f"{VS}{o}")), first)
            spec = label[: -len(f"{VS}{lab}")] if lab != first else label
            if spec in report["agents"]:
                played.setdefault((lab, spec), []).append(EpisodeLog.model_validate(row["log"]))
    return (report["split"], tuple(report["seeds"])), played
