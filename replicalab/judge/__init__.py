"""The deterministic judge: named pure components and one scorer."""

from replicalab.judge.constants import REWARD_SPEC_VERSION
from replicalab.judge.score import (
    EpisodeFacts,
    Judgement,
    judge,
    score_protocol,
    unknown_ids,
)

__all__ = ["REWARD_SPEC_VERSION", "EpisodeFacts", "Judgement", "judge", "score_protocol", "unknown_ids"]
