"""Policy models as ReplicaLab agents, one episode at a time.

``ModelAgent`` is an ordinary agent (observation -> action, or ``InvalidAction`` when the model's
text does not parse), so it plugs into ``run_episode`` and ``replicalab play``.  It plays its seat
exactly like a model seat of ``training.rollout.play.play_jobs`` (training and evaluation): an
append-only ``RoleChat`` per episode and generation from the exact token ids of the trajectory so
far.  For many episodes at once, use ``play_jobs`` (one batched generation per step).
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Union

from replicalab.models import (
    InvalidAction,
    LabManagerAction,
    LabManagerObservation,
    Observation,
    ScientistAction,
    ScientistObservation,
)
from replicalab.parsing import parse_action
from replicalab.prompts import RoleChat
from replicalab.seats import MODEL, AgentRole, parse_seat
from training.config.model import SamplingConfig
from training.rollout.play import CONTEXT_EXHAUSTED, ModelSeat, record_turn, row_seed, seat_prompt
from training.rollout.policy import Generation, PolicyModel

RoleObservation = Union[ScientistObservation, LabManagerObservation]
AgentAction = Union[ScientistAction, LabManagerAction, InvalidAction]
#: Deterministic decoding for play and evaluation.
GREEDY = SamplingConfig(do_sample=False)


def _role_view(observation: Any, role: AgentRole) -> RoleObservation:
    """Accept either the role's observation or the two-view ``Observation`` wrapper."""
    if isinstance(observation, Observation):
        view = observation.scientist if role == "scientist" else observation.lab_manager
        if view is None:
            raise ValueError(f"observation carries no {role} view")
        return view
    return observation


class ModelAgent:
    """An agent whose turns are sampled from ``policy``; build a fresh one per episode.

    ``chat`` is the role's append-only chat so far; ``generations`` keeps every ``Generation`` this
    agent produced, in turn order (each one's ``prompt_ids`` is the whole trajectory before it).
    A turn whose prompt no longer fits the context window is an ``InvalidAction`` (as in rollouts).
    """

    def __init__(self, policy: PolicyModel, role: AgentRole, sampling: SamplingConfig) -> None:
        self.policy = policy
        self.role: AgentRole = role
        self.sampling = sampling
        self.seat = ModelSeat()
        self.generations: list[Generation] = []

    @property
    def chat(self) -> RoleChat:
        return self.seat.chat

    def __call__(self, observation: Any) -> AgentAction:
        view = _role_view(observation, self.role)
        ids = seat_prompt(self.policy, self.seat, self.role, view, self.sampling)
        if ids is None:
            self.seat.parse_failures += 1
            return InvalidAction(role=self.role, error=CONTEXT_EXHAUSTED)
        seeds = None if self.sampling.seed is None else [row_seed(self.sampling.seed, 0, self.role, self.seat.turns)]
        (generation,) = self.policy.generate_ids([ids], self.sampling, row_seeds=seeds,
                                                  grammars=[self.seat.grammar])
        record_turn(self.seat, generation)
        self.generations.append(generation)
        action = parse_action(generation.text, self.role)
        self.seat.parse_failures += isinstance(action, InvalidAction)
        return action


def load_agent_spec(spec: str, role: AgentRole, *, sampling: Optional[SamplingConfig] = None,
                    device: str = "auto", chat_template: Optional[str] = None) -> Callable[[], ModelAgent]:
    """Parse ``"model:DIR"`` (or ``"model:default"``) into a factory of fresh ``ModelAgent``s.

    The checkpoint is loaded once; each call of the factory returns a new agent sharing it.
    Decoding is greedy unless ``sampling`` says otherwise.  The model is validated first
    (``training.model.validate``: one-line ``UserInputError``); ``chat_template`` (Jinja text) serves a
    tokenizer without one.  Other specs raise ``ValueError``.
    """
    seat = parse_seat(role, spec)
    if seat.kind != MODEL:
        raise ValueError(f"not a model seat (expected 'model:DIR'): {spec!r}")
    from training.model.validate import validate_model

    where = validate_model(seat.arg, chat_template=chat_template)
    policy = PolicyModel(where, device=device, chat_template=chat_template)
    chosen = sampling or greedy_for(policy)
    return lambda: ModelAgent(policy, role, chosen)


def greedy_for(policy: PolicyModel) -> SamplingConfig:
    """Greedy decoding with the checkpoint's own ``generation_config.max_new_tokens`` when it has one."""
    wanted = getattr(policy.checkpoint_generation_config, "max_new_tokens", None)
    return GREEDY.model_copy(update={"max_new_tokens": wanted}) if wanted else GREEDY
