"""The league table of ``replicalab eval``: one Bradley-Terry rating per seat of each role, from paired episodes.

Every pairing of an evaluation plays the same episodes (seed, template, difficulty), so two seats of one role
that faced the same opponent on the same episode can be compared directly:

- **Comparison.** Two Scientists that played the same Lab Manager on the same episode are compared by the
  Scientist's own reward (``replicalab.metrics.role_reward``): the higher wins (``WIN``), equal rewards are
  half a win each (``TIE``).  Lab Managers likewise by the Lab Manager's own reward, against the same
  Scientist.  Comparisons are pooled over every opponent played.
- **Model.** Bradley-Terry: seat ``i`` beats seat ``j`` with probability ``p_i / (p_i + p_j)``.  The strengths
  maximise the likelihood of the comparisons plus a symmetric prior, ``PRIOR_GAMES`` virtual games between every
  two seats of the role, half won and half lost by each, so a seat that wins (or loses) everything still gets a
  finite rating.  Fitted by Hunter's (2004) minorise-maximise iteration,
  ``p_i <- W_i / sum_j n_ij / (p_i + p_j)`` (``W_i``: seat ``i``'s wins, ``n_ij``: games of ``i`` and ``j``),
  until no log-strength moves by more than ``TOLERANCE``.
- **Rating.** The Elo scale: ``ELO_SCALE * log10(p_i)``, shifted so that the role's mean rating is
  ``MEAN_RATING``.  ``ELO_SCALE`` points of difference mean ten-to-one odds of winning a comparison.
- **Interval.** A ``CI_LEVEL`` percentile bootstrap: each resample draws episodes (an episode carries every
  comparison played on it) with replacement within each template x difficulty stratum, as many as the stratum
  holds (as ``training.eval.stats.bootstrap_ci`` does), and refits; seeded, so deterministic.
- **Also.** Each seat's number of comparisons and its win share (its wins over its comparisons; ties count half).

A role with fewer than two seats has no league.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, NamedTuple, Sequence

import numpy as np

from replicalab.metrics import role_reward
from replicalab.models import EpisodeLog
from replicalab.seats import ROLES
from training.eval.stats import CI_LEVEL

#: The mean rating of each role's league (ratings are relative: only differences mean anything).
MEAN_RATING = 1000.0
#: Rating points per factor of ten in Bradley-Terry strength (the Elo convention).
ELO_SCALE = 400.0
#: Virtual games between every two seats of a role, half won by each (the symmetric prior).
PRIOR_GAMES = 1.0
#: The fit stops when no log-strength moves by more than this in one iteration ...
TOLERANCE = 1e-10
#: ... or after this many iterations.
MAX_ITERATIONS = 20_000
#: The score of a comparison, for the first seat: won, drawn, lost.
WIN, TIE, LOSS = 1.0, 0.5, 0.0
#: Seed of the bootstrap resampling (intervals are deterministic).
BOOTSTRAP_SEED = 0

#: Between an agent and a Lab Manager in an episode's label (``pairing_label``).
VS = " vs "
#: One episode of an evaluation: (seed, template, difficulty).
EpisodeKey = tuple[int, str, str]
#: What ``run_eval`` played: (Lab Manager spec, Scientist spec) -> that pairing's EpisodeLogs.
Played = Mapping[tuple[str, str], Sequence[EpisodeLog]]


class Comparison(NamedTuple):
    """Two seats of one role on one episode against the same opponent: ``score`` is ``first``'s share of the win
    (``WIN``, ``TIE`` or ``LOSS``); ``second`` gets the rest."""

    episode: EpisodeKey
    first: str
    second: str
    score: float


def pairing_label(scientist: str, lab: str, first_lab: str) -> str:
    """How an evaluation's ``episodes.jsonl`` labels an episode: by its agent against the first Lab Manager, as
    ``AGENT vs LAB`` against another."""
    return scientist if lab == first_lab else f"{scientist}{VS}{lab}"


def episode_key(log: EpisodeLog) -> EpisodeKey:
    return (log.seed, log.scenario_template, log.difficulty)


def stratum(episode: EpisodeKey) -> tuple[str, str]:
    """The template x difficulty cell an episode belongs to (what the bootstrap resamples within)."""
    return episode[1], episode[2]


def seat_rewards(played: Played, role: str) -> dict[tuple[str, str], dict[EpisodeKey, float]]:
    """(seat of ``role``, its opponent) -> episode -> the seat's own reward, for every pairing played."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; valid roles: {', '.join(ROLES)}")
    table: dict[tuple[str, str], dict[EpisodeKey, float]] = {}
    for (lab, scientist), logs in played.items():
        key = (scientist, lab) if role == ROLES[0] else (lab, scientist)
        table[key] = {episode_key(log): role_reward(log, role) for log in logs}
    return table


def seats_of(played: Played, role: str) -> list[str]:
    """The seats of ``role`` in ``played``, in the order first played."""
    return list(dict.fromkeys(seat for seat, _ in seat_rewards(played, role)))


def score(mine: float, theirs: float) -> float:
    return WIN if mine > theirs else LOSS if mine < theirs else TIE


def comparisons(played: Played, role: str) -> list[Comparison]:
    """Every comparison of two seats of ``role`` on an episode both played against the same opponent (each pair
    once, the seat first played first)."""
    table = seat_rewards(played, role)
    seats = seats_of(played, role)
    opponents = list(dict.fromkeys(opponent for _, opponent in table))
    found = []
    for opponent in opponents:
        faced = [seat for seat in seats if (seat, opponent) in table]
        for i, first in enumerate(faced):
            for second in faced[i + 1:]:
                a, b = table[first, opponent], table[second, opponent]
                found += [Comparison(e, first, second, score(a[e], b[e])) for e in a if e in b]
    return found


def fit_log_strengths(wins: np.ndarray) -> np.ndarray:
    """Bradley-Terry log-strengths (natural log, mean zero over the seats) from ``wins[..., i, j]``, the credit of
    seat ``i`` over seat ``j``; the leading axes are independent fits (bootstrap resamples fit in one batch).
    ``PRIOR_GAMES`` virtual games between every two seats keep every strength finite."""
    k = wins.shape[-1]
    w = wins + (PRIOR_GAMES / 2) * (1.0 - np.eye(k))
    games = w + np.swapaxes(w, -1, -2)
    log_total = np.log(w.sum(axis=-1))
    log_p = np.zeros(wins.shape[:-1])
    for _ in range(MAX_ITERATIONS):
        p = np.exp(log_p)
        new = log_total - np.log((games / (p[..., :, None] + p[..., None, :])).sum(axis=-1))
        new -= new.mean(axis=-1, keepdims=True)
        done = np.max(np.abs(new - log_p), initial=0.0) < TOLERANCE
        log_p = new
        if done:
            break
    return log_p


def ratings_of(log_strengths: np.ndarray) -> np.ndarray:
    """Log-strengths on the Elo scale, centred so each fit's mean rating is ``MEAN_RATING``."""
    elo = ELO_SCALE * log_strengths / math.log(10)
    return elo - elo.mean(axis=-1, keepdims=True) + MEAN_RATING


def _episode_wins(found: Sequence[Comparison], seats: Sequence[str]) -> tuple[list[EpisodeKey], np.ndarray]:
    """The episodes (sorted) and ``wins[e, i, j]``: seat ``i``'s credit over seat ``j`` on episode ``e``."""
    index = {seat: i for i, seat in enumerate(seats)}
    episodes = sorted({c.episode for c in found})
    row = {e: n for n, e in enumerate(episodes)}
    wins = np.zeros((len(episodes), len(seats), len(seats)))
    for c in found:
        e, i, j = row[c.episode], index[c.first], index[c.second]
        wins[e, i, j] += c.score
        wins[e, j, i] += 1.0 - c.score
    return episodes, wins


def resample_counts(episodes: Sequence[EpisodeKey], samples: int, seed: int = BOOTSTRAP_SEED) -> np.ndarray:
    """``counts[b, e]``: how often bootstrap resample ``b`` draws episode ``e``; each resample draws, within each
    template x difficulty stratum, as many episodes as the stratum holds, with replacement."""
    rng = np.random.default_rng(seed)
    counts = np.zeros((samples, len(episodes)))
    groups: dict[tuple[str, str], list[int]] = {}
    for n, e in enumerate(episodes):
        groups.setdefault(stratum(e), []).append(n)
    rows = np.arange(samples)[:, None]
    for members in groups.values():
        idx = np.asarray(members)
        np.add.at(counts, (rows, idx[rng.integers(0, len(idx), size=(samples, len(idx)))]), 1.0)
    return counts


def league(found: Sequence[Comparison], seats: Sequence[str], samples: int = 2000,
           seed: int = BOOTSTRAP_SEED) -> list[dict[str, Any]]:
    """One row per seat, highest rating first: ``seat``, ``rating``, ``ci95`` (bootstrap over episodes within
    strata), ``comparisons`` and ``win_share`` (None without a comparison).  Neither the ratings nor the
    intervals depend on the order ``seats`` are given in (up to rounding)."""
    if len(seats) < 2:
        raise ValueError(f"a league needs at least two seats, got {list(seats)}")
    unknown = {s for c in found for s in (c.first, c.second)} - set(seats)
    if unknown:
        raise ValueError(f"comparisons name seats outside the league: {sorted(unknown)}")
    episodes, per_episode = _episode_wins(found, seats)
    wins = per_episode.sum(axis=0)
    rating = ratings_of(fit_log_strengths(wins))
    k = len(seats)
    boot = (resample_counts(episodes, samples, seed) @ per_episode.reshape(len(episodes), k * k)).reshape(-1, k, k)
    spread = np.sort(ratings_of(fit_log_strengths(boot)), axis=0)
    tail = (1 - CI_LEVEL) / 2
    low, high = spread[int(tail * (samples - 1))], spread[int((1 - tail) * (samples - 1))]
    games = wins + wins.T
    rows = []
    for i, seat in enumerate(seats):
        count = float(games[i].sum())
        rows.append({"seat": seat, "rating": float(rating[i]), "ci95": [float(low[i]), float(high[i])],
                     "comparisons": int(round(count)), "win_share": float(wins[i].sum() / count) if count else None})
    return sorted(rows, key=lambda r: -r["rating"])


def league_tables(played: Played, samples: int = 2000, seed: int = BOOTSTRAP_SEED) -> dict[str, list[dict[str, Any]]]:
    """``{role: league rows}`` for each role with at least two seats in ``played`` (roles in ``ROLES`` order)."""
    tables = {}
    for role in ROLES:
        seats = seats_of(played, role)
        if len(seats) >= 2:
            tables[role] = league(comparisons(played, role), seats, samples, seed)
    return tables
