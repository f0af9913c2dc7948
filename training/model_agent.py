"""Policy models as ReplicaLab agents: one at a time (``ModelAgent``) or many episodes in lockstep.

``ModelAgent`` is an ordinary agent (observation -> action, or ``InvalidAction`` when the model's
text does not parse), so it plugs into ``run_episode``.  ``run_episodes_batched`` drives many
``episode_loop`` generators at once and answers every pending model turn with ONE
``PolicyModel.generate`` call per step, returning each episode's log together with the
``Generation`` records (token ids + log-probs) of the model's turns, in turn order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Optional, Sequence, Union

from replicalab.models import (
    EpisodeLog,
    InvalidAction,
    LabManagerAction,
    LabManagerObservation,
    Observation,
    ScientistAction,
    ScientistObservation,
)
from replicalab.parsing import parse_action
from replicalab.prompts import build_messages
from training.model_config import SamplingConfig
from training.policy import Generation, Messages, PolicyModel

SeatRole = Literal["scientist", "lab_manager"]
RoleObservation = Union[ScientistObservation, LabManagerObservation]
AgentAction = Union[ScientistAction, LabManagerAction, InvalidAction]
Agent = Callable[[Any], AgentAction]
#: Prefix of agent specs that name a model checkpoint (``model:DIR``, ``model:default``).
MODEL_SPEC_PREFIX = "model:"
#: Spec value that means the embedded default model (built on first use).
DEFAULT_SPEC_VALUE = "default"
#: Tokens kept free besides the chat template overhead, because BPE counts are not exactly additive.
PROMPT_SAFETY_TOKENS = 8
#: Deterministic decoding for play and evaluation.
GREEDY = SamplingConfig(do_sample=False)


def _role_view(observation: Any, role: SeatRole) -> RoleObservation:
    """Accept either the role's observation or the two-view ``Observation`` wrapper."""
    if isinstance(observation, Observation):
        view = observation.scientist if role == "scientist" else observation.lab_manager
        if view is None:
            raise ValueError(f"observation carries no {role} view")
        return view
    return observation


def prompt_messages(policy: PolicyModel, observation: RoleObservation,
                    sampling: Optional[SamplingConfig] = None) -> Messages:
    """``build_messages`` with a token budget measured by the policy's own tokenizer."""
    overhead = len(policy.encode_chat([{"role": "system", "content": ""}, {"role": "user", "content": ""}]))
    budget = policy.prompt_budget(sampling) - overhead - PROMPT_SAFETY_TOKENS
    return build_messages(observation, token_budget=budget, count_tokens=policy.count_tokens)


class ModelAgent:
    """An agent whose turns are sampled from ``policy``; build a fresh one per episode.

    ``generations`` keeps every ``Generation`` this agent produced, in turn order.
    """

    def __init__(self, policy: PolicyModel, role: SeatRole,
                 sampling: Optional[SamplingConfig] = None) -> None:
        self.policy = policy
        self.role: SeatRole = role
        self.sampling = sampling
        self.generations: list[Generation] = []

    def __call__(self, observation: Any) -> AgentAction:
        view = _role_view(observation, self.role)
        (generation,) = self.policy.generate([prompt_messages(self.policy, view, self.sampling)],
                                             self.sampling)
        self.generations.append(generation)
        return parse_action(generation.text, self.role)


@dataclass(frozen=True)
class EpisodeSpec:
    """Which scenario an episode plays."""

    seed: int
    template: str
    difficulty: str


@dataclass(frozen=True)
class EpisodeRollout:
    """One finished episode: its log and the model seat's generations, in turn order."""

    spec: EpisodeSpec
    log: EpisodeLog
    generations: list[Generation] = field(default_factory=list)


def run_episodes_batched(
    policy: PolicyModel,
    seat_role: SeatRole,
    specs: Sequence[EpisodeSpec],
    *,
    opponent: Optional[Callable[[EpisodeSpec], Optional[Agent]]] = None,
    sampling: Optional[SamplingConfig] = None,
    max_rounds: Optional[int] = None,
) -> list[EpisodeRollout]:
    """Play every spec with ``policy`` in ``seat_role``, batching the model's turns across episodes.

    ``opponent(spec)`` builds the other seat's agent per episode; by default the Lab Manager seat is
    the scripted one and the Scientist seat is ``AdaptiveScientist()``.  Each step gathers the
    pending turn of every unfinished episode and answers them with a single ``policy.generate``.
    """
    from replicalab import ReplicaLabEnv
    from replicalab.episode import EXTERNAL, episode_loop

    loops, pending, logs = [], {}, {}
    generations: list[list[Generation]] = [[] for _ in specs]
    for index, spec in enumerate(specs):
        other = opponent(spec) if opponent is not None else _default_opponent(seat_role)
        scientist, lab_manager = (EXTERNAL, other) if seat_role == "scientist" else (other, EXTERNAL)
        env = ReplicaLabEnv() if max_rounds is None else ReplicaLabEnv(max_rounds=max_rounds)
        loop = episode_loop(env, scientist, lab_manager, seed=spec.seed, template=spec.template,
                            difficulty=spec.difficulty)
        loops.append(loop)
        _advance(loops, index, None, pending, logs)
    while pending:
        order = sorted(pending)
        for index in order:
            if pending[index].role != seat_role:
                raise RuntimeError(f"episode {index} asked for a {pending[index].role} turn")
        batch = [prompt_messages(policy, pending[i].observation, sampling) for i in order]
        outputs = policy.generate(batch, sampling)
        for index, generation in zip(order, outputs):
            generations[index].append(generation)
            _advance(loops, index, parse_action(generation.text, seat_role), pending, logs)
    return [EpisodeRollout(spec, logs[i], generations[i]) for i, spec in enumerate(specs)]


def _advance(loops: list, index: int, action: Optional[AgentAction], pending: dict, logs: dict) -> None:
    """Send ``action`` (None: start) to episode ``index``; record its next request or its log."""
    try:
        request = next(loops[index]) if action is None else loops[index].send(action)
    except StopIteration as stop:
        pending.pop(index, None)
        logs[index] = stop.value
    else:
        pending[index] = request


def _default_opponent(seat_role: SeatRole) -> Optional[Agent]:
    if seat_role == "scientist":
        return None  # the scripted Lab Manager
    from replicalab.agents import AdaptiveScientist

    return AdaptiveScientist()


def load_agent_spec(spec: str, role: SeatRole, *, sampling: Optional[SamplingConfig] = None,
                    device: str = "auto") -> Callable[[], ModelAgent]:
    """Parse ``"model:DIR"`` (or ``"model:default"``) into a factory of fresh ``ModelAgent``s.

    The checkpoint is loaded once; each call of the factory returns a new agent sharing it.
    Decoding is greedy unless ``sampling`` says otherwise.  Other specs raise ``ValueError``.
    """
    if not spec.startswith(MODEL_SPEC_PREFIX):
        raise ValueError(f"not a model agent spec (expected 'model:DIR'): {spec!r}")
    target = spec[len(MODEL_SPEC_PREFIX):].strip()
    if not target:
        raise ValueError("model agent spec needs a directory or model id: 'model:DIR'")
    if target == DEFAULT_SPEC_VALUE:
        from training.default_model import resolve_default_model

        target = str(resolve_default_model())
    elif Path(target).expanduser().exists():
        target = str(Path(target).expanduser())
    chosen = sampling or GREEDY
    policy = PolicyModel(target, sampling=chosen, device=device)
    return lambda: ModelAgent(policy, role, chosen)
