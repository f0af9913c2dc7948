"""ReplicaLab: a negotiation game for planning replication experiments under lab constraints."""

from replicalab.env import ReplicaLabEnv
from replicalab.episode import replay_episode, run_episode
from replicalab.scenarios import DIFFICULTIES, TEMPLATES, generate_scenario
from replicalab.seeds import TEST_SEEDS, TRAIN_SEEDS, VALIDATION_SEEDS

__all__ = [
    "DIFFICULTIES", "TEMPLATES", "TEST_SEEDS", "TRAIN_SEEDS", "VALIDATION_SEEDS", "ReplicaLabEnv",
    "generate_scenario", "replay_episode", "run_episode",
]
