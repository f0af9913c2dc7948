"""Supervised transcripts of the scripted agents, as conversational prompt/completion examples.

Recording wrappers sit around the scripted agents of real episodes; every valid turn of a recorded
seat becomes ``{"prompt": build_messages(obs), "completion": [assistant: format_action(action)]}``.
Seeds come only from ``TRAIN_SEEDS``.  No torch here.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

from replicalab import DIFFICULTIES, TEMPLATES, TRAIN_SEEDS, ReplicaLabEnv, generate_scenario, run_episode
from replicalab.agents import AdaptiveScientist, NaiveScientist
from replicalab.lab import ScriptedLabManager
from replicalab.models import InvalidAction
from replicalab.parsing import format_action
from replicalab.prompts import build_messages

Example = dict[str, list[dict[str, str]]]


@dataclass(frozen=True)
class TranscriptStats:
    """What the transcript collection produced (reported in the model card)."""

    episodes: int
    naive_episodes: int
    examples_scientist: int
    examples_lab_manager: int
    seeds: tuple[int, ...]
    mean_reward_adaptive: float


class _Recorder:
    """Wrap an agent; append (prompt, completion) for each valid action it takes."""

    def __init__(self, agent: Callable[[Any], Any], sink: Optional[list[Example]]) -> None:
        self.agent, self.sink = agent, sink

    def __call__(self, observation: Any) -> Any:
        action = self.agent(observation)
        if self.sink is not None and not isinstance(action, InvalidAction):
            self.sink.append(
                {
                    "prompt": build_messages(observation),
                    "completion": [{"role": "assistant", "content": format_action(action)}],
                }
            )
        return action


def train_seeds(n_seeds: int) -> list[int]:
    """The first ``n_seeds`` seeds of the training split (never held-out seeds)."""
    seeds = list(TRAIN_SEEDS)[:n_seeds]
    if len(seeds) < n_seeds:
        raise ValueError(f"TRAIN_SEEDS has only {len(seeds)} seeds, {n_seeds} requested")
    return seeds


def episode_grid(n_seeds: int) -> Iterator[tuple[int, str, str]]:
    """(seed, template, difficulty) for every training seed x template x difficulty."""
    for seed in train_seeds(n_seeds):
        for template in TEMPLATES:
            for difficulty in DIFFICULTIES:
                yield seed, template, difficulty


def collect_examples(
    n_seeds: int, *, naive_fraction: float = 0.0, max_rounds: int = 6, shuffle_seed: int = 0
) -> tuple[list[Example], list[Example], TranscriptStats]:
    """Play the scripted agents on the training grid; return (scientist, lab manager) examples.

    A ``naive_fraction`` of episodes (chosen with ``random.Random(shuffle_seed)``) seat
    ``NaiveScientist``; those contribute Lab Manager turns only (more varied states for that seat
    without teaching the Scientist seat a weaker policy).
    """
    rng = random.Random(shuffle_seed)
    scientist_examples: list[Example] = []
    lab_examples: list[Example] = []
    episodes = naive = 0
    adaptive_rewards: list[float] = []
    for seed, template, difficulty in episode_grid(n_seeds):
        use_naive = rng.random() < naive_fraction
        scenario = generate_scenario(seed, template, difficulty)
        scientist = _Recorder(
            NaiveScientist() if use_naive else AdaptiveScientist(),
            None if use_naive else scientist_examples,
        )
        lab_manager = _Recorder(ScriptedLabManager(scenario), lab_examples)
        log = run_episode(ReplicaLabEnv(max_rounds=max_rounds), scientist, lab_manager,
                          seed=seed, template=template, difficulty=difficulty)
        episodes += 1
        naive += int(use_naive)
        if not use_naive:
            adaptive_rewards.append(log.total_reward)
    rng.shuffle(scientist_examples)
    rng.shuffle(lab_examples)
    stats = TranscriptStats(
        episodes=episodes,
        naive_episodes=naive,
        examples_scientist=len(scientist_examples),
        examples_lab_manager=len(lab_examples),
        seeds=tuple(train_seeds(n_seeds)),
        mean_reward_adaptive=sum(adaptive_rewards) / max(1, len(adaptive_rewards)),
    )
    return scientist_examples, lab_examples, stats


def example_texts(examples: list[Example]) -> Iterator[str]:
    """Every message content of the examples (the tokenizer's training corpus)."""
    for example in examples:
        for message in (*example["prompt"], *example["completion"]):
            yield message["content"]
