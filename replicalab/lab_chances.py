"""Where a Lab Manager's reply can change what the episode pays: its turns at which the lab's own check finds the
current protocol infeasible.

At such a turn accepting ends nothing (the env agrees only to a feasible plan) and what pays is a repair the
Scientist can take: a technique and the items a feasible plan needs.  At a turn whose plan passes every check the
lab's best move is to accept, whatever it writes otherwise; a group of replies branched there holds one decision.
``repair_chances(log)`` replays the log's turns (``replicalab.episode.replayed_views``) to read each Lab
Manager view's ``plan_check``.
"""

from __future__ import annotations

from replicalab.episode import replayed_views
from replicalab.models import EpisodeLog, LabManagerObservation


def plan_fails_check(observation: LabManagerObservation) -> bool:
    """The view holds a protocol and the lab's check fails it on at least one flag."""
    return observation.current_protocol is not None and any(observation.plan_check.values())


def repair_chances(log: EpisodeLog) -> list[int]:
    """The indices, among the episode's Lab Manager turns, of the turns whose current protocol fails the lab's
    check, in turn order."""
    views = [view for turn, view in replayed_views(log) if turn.role == "lab_manager"]
    return [index for index, view in enumerate(views) if plan_fails_check(view)]
