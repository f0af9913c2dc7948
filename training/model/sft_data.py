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

import json
import random
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from replicalab import (
    TRAIN_SEEDS,
    ReplicaLabEnv,
    generate_scenario,
    run_episode,
)
from replicalab.agents import SCIENTIST_FACTORIES, SKILLS, SkilledScientist
from replicalab.lab import ScriptedLabManager
from replicalab.models import EpisodeLog, InvalidAction
from replicalab.parsing import format_action
from replicalab.prompts import RoleChat
from replicalab.scenarios import cells
from replicalab.seats import PRIVILEGED_SCIENTISTS
from replicalab.skill_use import skill_chances

Example = dict[str, Any]
#: The examples of one seat in one episode, in turn order (each prompt extends the previous one).
Transcript = list[Example]


@dataclass(frozen=True)
class TranscriptStats:
    """What the transcript collection produced (reported in the model card)."""

    episodes: int
    #: Per skill: the Scientist turns at its chance, and those at which the Scientist used it.
    skill_chances: dict[str, int]
    skill_uses: dict[str, int]
    examples_scientist: int
    examples_lab_manager: int
    #: Scientist turns at a skill's chance (``replicalab.skill_use``), and those at which the skill was used.
    chance_turns: int
    chance_turns_used: int
    seeds: tuple[int, ...]
    #: Mean reward of the recorded episodes.
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


def record_episode(seed: int, template: str, difficulty: str, *, scientist: str = "naive",
                   agent: Callable[[Any], Any] | None = None, lab_manager: ScriptedLabManager | None = None,
                   max_rounds: int = 6) -> tuple[Transcript, Transcript, EpisodeLog]:
    """Play one scripted episode (``agent``, else the named scripted Scientist, one of ``SCIENTISTS``, vs
    ``lab_manager``, else the default ``ScriptedLabManager``); return both seats' transcripts and the log."""
    if agent is None and scientist not in SCIENTISTS:
        raise ValueError(f"unknown transcript scientist {scientist!r}; choose one of {', '.join(SCIENTISTS)}")
    recorded = _Recorder(agent or SCIENTIST_FACTORIES[scientist](seed, template, difficulty))
    lab_manager = _Recorder(lab_manager or ScriptedLabManager(generate_scenario(seed, template, difficulty)))
    log = run_episode(ReplicaLabEnv(max_rounds=max_rounds), recorded, lab_manager,
                      seed=seed, template=template, difficulty=difficulty)
    return recorded.examples, lab_manager.examples, log


def chance_scientist(seed: int, skill_rate: float) -> SkilledScientist:
    """A scripted Scientist with every skill that uses each at a chance with probability ``skill_rate``, a coin
    per chance (``SkilledScientist(rate=...)``): what it did earlier in the episode says nothing about its next
    decision."""
    return SkilledScientist(SKILLS, rate=skill_rate, seed=seed)


def collect_transcripts(
    n_seeds: int, *, skill_rate: float = 0.5, lab_thrifty_rate: float = 0.5, max_rounds: int = 6,
    shuffle_seed: int = 0, progress: bool = False, marked_skills: tuple[str, ...] = SKILLS,
) -> tuple[list[Transcript], list[Transcript], TranscriptStats]:
    """Play the scripted agents on the training grid; return (scientist, lab manager) transcripts.

    One transcript per seat and episode, shuffled with ``random.Random(shuffle_seed)``.  The Scientist decides
    per chance (``chance_scientist``): at every turn where a skill's trigger shows it uses the skill with
    probability ``skill_rate``, so P(skill | chance) does not depend on the episode's history.  The Lab Manager
    decides per turn too: the thrifty lab's move with probability ``lab_thrifty_rate``, else the cooperative
    one's.  Both coins are seeded per episode from the same RNG.  Each Scientist example at the chance of a skill
    of ``marked_skills`` (every skill by default) is marked ``"skill_chance": True`` (``is_skill_chance``); the
    stats count every skill's chances.  ``progress`` shows a progress bar on a terminal.
    """
    from tqdm import tqdm

    for name, rate in (("skill_rate", skill_rate), ("lab_thrifty_rate", lab_thrifty_rate)):
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"{name} must be within [0, 1], got {rate}")
    unknown = set(marked_skills) - set(SKILLS)
    if unknown:
        raise ValueError(f"unknown skills {sorted(unknown)} in marked_skills; valid: {', '.join(SKILLS)}")
    rng = random.Random(shuffle_seed)
    scientist: list[Transcript] = []
    lab: list[Transcript] = []
    chances = {skill: 0 for skill in SKILLS}
    uses = {skill: 0 for skill in SKILLS}
    recorded_rewards: list[float] = []
    grid = list(episode_grid(n_seeds))
    bar = tqdm(grid, desc="transcripts", unit="episode", disable=None if progress else True)
    for seed, template, difficulty in bar:
        agent = chance_scientist(rng.randrange(2**31), skill_rate)
        lab_agent = ScriptedLabManager(generate_scenario(seed, template, difficulty),
                                       thrifty_rate=lab_thrifty_rate, seed=rng.randrange(2**31))
        sci, lab_t, log = record_episode(seed, template, difficulty, agent=agent, lab_manager=lab_agent,
                                         max_rounds=max_rounds)
        for chance in skill_chances(log):
            if chance.skill in marked_skills:
                sci[chance.turn]["skill_chance"] = True
            chances[chance.skill] += 1
            uses[chance.skill] += chance.used
        scientist.append(sci)
        recorded_rewards.append(log.total_reward)
        lab.append(lab_t)
    rng.shuffle(scientist)
    rng.shuffle(lab)
    stats = TranscriptStats(
        episodes=len(grid),
        skill_chances=chances,
        skill_uses=uses,
        examples_scientist=sum(map(len, scientist)),
        examples_lab_manager=sum(map(len, lab)),
        chance_turns=sum(chances.values()),
        chance_turns_used=sum(uses.values()),
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


def plan_before(transcript: Transcript, k: int) -> dict:
    """The Scientist's plan on the table at turn ``k``: its latest own protocol before it, as reply fields."""
    replies = (json.loads(e["completion"][0]["content"]) for e in reversed(transcript[:k]))
    return next(r for r in replies if "sample_size" in r)


def is_skill_chance(example: Example) -> bool:
    """Whether this Scientist turn is at a chance of one of its skills (marked by ``collect_transcripts``): a
    decision the warm start must leave open both ways."""
    return bool(example.get("skill_chance"))


def example_texts(examples: list[dict[str, list[dict[str, str]]]]) -> Iterator[str]:
    """Every message content of the examples (the tokenizer's training corpus)."""
    for example in examples:
        for key in ("prompt", "completion", "messages"):
            for message in example.get(key, ()):
                yield message["content"]
