"""Supervised transcripts of the scripted agents, in the append-only chat format of rollouts.

Recording wrappers sit around the scripted agents of real episodes.  Each recorded seat keeps a
``replicalab.prompts.RoleChat``, exactly as ``training.rollout.play.play_jobs`` does for a model
seat, and every turn becomes ``{"prompt": chat.next_prompt(obs), "completion": [assistant:
format_action(action)]}`` before the reply is appended with ``chat.add_reply``.  So the prompt of turn
k is turn k-1's prompt + its assistant reply + a follow-up user message, and a seat's last example
holds the whole conversation (``conversation_example`` turns it into one multi-turn example whose
assistant messages all carry the loss).  Seeds come only from ``TRAIN_SEEDS``.  No torch here.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from replicalab import (
    TRAIN_SEEDS,
    ReplicaLabEnv,
    generate_scenario,
    run_episode,
)
from replicalab.agents import SCIENTIST_FACTORIES
from replicalab.lab import ScriptedLabManager
from replicalab.models import EpisodeLog, InvalidAction
from replicalab.parsing import format_action
from replicalab.prompts import RoleChat
from replicalab.render import suggestion_in
from replicalab.scenarios import cells
from replicalab.seats import PRIVILEGED_SCIENTISTS

Example = dict[str, list[dict[str, str]]]
#: The examples of one seat in one episode, in turn order (each prompt extends the previous one).
Transcript = list[Example]


@dataclass(frozen=True)
class TranscriptStats:
    """What the transcript collection produced (reported in the model card)."""

    episodes: int
    naive_episodes: int
    reader_episodes: int
    examples_scientist: int
    examples_lab_manager: int
    seeds: tuple[int, ...]
    #: Mean reward of the episodes whose Scientist transcripts are recorded (``scientist_kinds``).
    mean_reward_recorded: float


class _Recorder:
    """Wrap an agent; keep its role's append-only chat and record one example per turn."""

    def __init__(self, agent: Callable[[Any], Any]) -> None:
        self.agent = agent
        self.chat = RoleChat()
        self.examples: Transcript = []

    def __call__(self, observation: Any) -> Any:
        prompt = self.chat.next_prompt(observation)
        action = self.agent(observation)
        if isinstance(action, InvalidAction):  # scripted agents never do this; keep the chat honest anyway
            raise RuntimeError(f"scripted agent produced an invalid action: {action.error}")
        text = format_action(action)
        self.examples.append({"prompt": prompt, "completion": [{"role": "assistant", "content": text}]})
        self.chat.add_reply(text)
        return action


def train_seeds(n_seeds: int) -> list[int]:
    """The first ``n_seeds`` seeds of the training split (never held-out seeds)."""
    seeds = list(TRAIN_SEEDS)[:n_seeds]
    if len(seeds) < n_seeds:
        raise ValueError(f"TRAIN_SEEDS has only {len(seeds)} seeds, {n_seeds} requested")
    return seeds


def episode_grid(n_seeds: int) -> Iterator[tuple[int, str, str]]:
    """(seed, template, difficulty) for every training seed x template x difficulty."""
    grid = cells()
    for seed in train_seeds(n_seeds):  # seeds outermost, as every job list is ordered
        for template, difficulty in grid:
            yield seed, template, difficulty


#: The scripted Scientists whose episodes make up the transcripts.
#: Scripted Scientists whose episodes can be recorded: every one that plays from visible facts.
SCIENTISTS = tuple(n for n in SCIENTIST_FACTORIES if n not in PRIVILEGED_SCIENTISTS + ("random",))


def record_episode(seed: int, template: str, difficulty: str, *, scientist: str = "adaptive",
                   max_rounds: int = 6) -> tuple[Transcript, Transcript, EpisodeLog]:
    """Play one scripted episode (the named scripted Scientist, one of ``SCIENTISTS``, vs
    ``ScriptedLabManager``); return both seats' transcripts and the log."""
    if scientist not in SCIENTISTS:
        raise ValueError(f"unknown transcript scientist {scientist!r}; choose one of {', '.join(SCIENTISTS)}")
    recorded = _Recorder(SCIENTIST_FACTORIES[scientist](seed, template, difficulty))
    lab_manager = _Recorder(ScriptedLabManager(generate_scenario(seed, template, difficulty)))
    log = run_episode(ReplicaLabEnv(max_rounds=max_rounds), recorded, lab_manager,
                      seed=seed, template=template, difficulty=difficulty)
    return recorded.examples, lab_manager.examples, log


def collect_transcripts(
    n_seeds: int, *, naive_fraction: float = 0.0, reader_fraction: float = 0.0, max_rounds: int = 6,
    shuffle_seed: int = 0, scientist_kinds: tuple[str, ...] = ("adaptive", "reader"), progress: bool = False,
) -> tuple[list[Transcript], list[Transcript], TranscriptStats]:
    """Play the scripted agents on the training grid; return (scientist, lab manager) transcripts.

    One transcript per recorded seat and episode, shuffled with ``random.Random(shuffle_seed)``.
    Each episode's Scientist is drawn with the same RNG: ``NaiveScientist`` with probability
    ``naive_fraction``, else ``ReaderScientist`` with probability ``reader_fraction``, else
    ``AdaptiveScientist``.  Every episode gives a Lab Manager transcript; only the episodes of the
    Scientists in ``scientist_kinds`` give a Scientist transcript (the others add varied states for the
    Lab Manager seat without teaching the Scientist seat their policy).  ``progress`` shows a progress
    bar on a terminal.
    """
    from tqdm import tqdm

    unknown = [k for k in scientist_kinds if k not in SCIENTISTS]
    if unknown or not scientist_kinds:
        raise ValueError(f"scientist_kinds must name some of {', '.join(SCIENTISTS)}; got {list(scientist_kinds)}")
    if naive_fraction + reader_fraction > 1.0:
        raise ValueError(f"naive_fraction + reader_fraction must be at most 1, got {naive_fraction + reader_fraction}")
    rng = random.Random(shuffle_seed)
    scientist: list[Transcript] = []
    lab: list[Transcript] = []
    counts = {name: 0 for name in SCIENTISTS}
    recorded_rewards: list[float] = []
    grid = list(episode_grid(n_seeds))
    bar = tqdm(grid, desc="transcripts", unit="episode", disable=None if progress else True)
    for seed, template, difficulty in bar:
        draw = rng.random()
        kind = "naive" if draw < naive_fraction else "reader" if draw < naive_fraction + reader_fraction else "adaptive"
        sci, lab_t, log = record_episode(seed, template, difficulty, scientist=kind, max_rounds=max_rounds)
        counts[kind] += 1
        if kind in scientist_kinds:
            scientist.append(sci)
            recorded_rewards.append(log.total_reward)
        lab.append(lab_t)
    rng.shuffle(scientist)
    rng.shuffle(lab)
    stats = TranscriptStats(
        episodes=sum(counts.values()),
        naive_episodes=counts["naive"],
        reader_episodes=counts["reader"],
        examples_scientist=sum(map(len, scientist)),
        examples_lab_manager=sum(map(len, lab)),
        seeds=tuple(train_seeds(n_seeds)),
        mean_reward_recorded=sum(recorded_rewards) / max(1, len(recorded_rewards)),
    )
    return scientist, lab, stats


def turn_example(transcript: Transcript, k: int) -> dict[str, list[dict[str, str]]]:
    """Turn ``k`` as a conversation ``{"messages": [system, user, assistant, ...]}``: the chat up to
    it and the seat's reply (``k = 0`` the opening move alone, ``k = -1`` the seat's whole episode,
    every assistant message one of its turns)."""
    turn = transcript[k]
    return {"messages": [*turn["prompt"], *turn["completion"]]}


def conversation_example(transcript: Transcript) -> dict[str, list[dict[str, str]]]:
    """The whole chat of one seat in one episode (``turn_example`` of its last turn)."""
    return turn_example(transcript, -1)


def follows_technique_move(example: Example) -> bool:
    """Whether this turn answers a Lab Manager suggestion that moves the plan to another technique
    (the Scientist's one real decision on hard cells: take the lab's technique or propose another)."""
    return "technique" in suggestion_in(example["prompt"][-1]["content"])


def example_texts(examples: list[dict[str, list[dict[str, str]]]]) -> Iterator[str]:
    """Every message content of the examples (the tokenizer's training corpus)."""
    for example in examples:
        for key in ("prompt", "completion", "messages"):
            for message in example.get(key, ()):
                yield message["content"]
