"""ReplicaLab: a negotiation game for planning replication experiments under lab constraints."""

from replicalab.env import ReplicaLabEnv
from replicalab.episode import replay_episode, run_episode
from replicalab.scenarios import DIFFICULTIES, TEMPLATES, generate_scenario
from replicalab.seeds import HELDOUT_SEEDS, TRAIN_SEEDS

__all__ = [
    "DIFFICULTIES", "HELDOUT_SEEDS", "TEMPLATES", "TRAIN_SEEDS", "ReplicaLabEnv", "generate_scenario",
    "replay_episode", "run_episode",
]
