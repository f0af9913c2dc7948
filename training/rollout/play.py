"""``play_jobs``: many episodes in lockstep, one batched generation per model per step.

Each model seat keeps an append-only chat per episode (``replicalab.prompts.RoleChat``) and its token
ids, so the prompt of turn k is exactly the trajectory so far: the sequence the trainer scores later
is the sequence the model sampled from.  Environment tokens between the model's turns (the closing of
its reply, the next user message, the assistant header) are masked out of the loss with ``env_mask``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Optional, Sequence

from replicalab.env import ReplicaLabEnv
from replicalab.episode import EXTERNAL, episode_loop
from replicalab.metrics import role_reward
from replicalab.models import InvalidAction
from replicalab.parsing import parse_action
from replicalab.prompts import RoleChat
from replicalab.seats import (
    MODEL_PREFIX,
    POLICY,
    SCRIPTED,
    other_role,
    parse_seat,
    scripted_agent,
)
from training.config.model import SamplingConfig
from training.rollout.contract import RolloutSpec
from training.rollout.binding import grammar_key
from training.rollout.grammar import trajectory_key
from training.rollout.policy import Generation, PolicyModel
from training.rollout.records import EpisodeJob, ModelTurn, RoleTrajectory, RolloutRecord

CONTEXT_EXHAUSTED = "context window exhausted"
REPLY_SENTINEL = "\u241eREPLY\u241e"


@dataclass
class ModelSeat:
    """One model seat of one episode: its chat, its token sequence and what it generated.

    ``seat_prompt`` extends it with an observation, ``record_turn`` with the model's reply; the same
    pair drives ``training.rollout.agent.ModelAgent``, so one-at-a-time play matches rollouts."""

    chat: RoleChat = field(default_factory=RoleChat)
    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    turns: int = 0
    parse_failures: int = 0
    last_reply: str = ""
    last_finished: bool = True
    exhausted: bool = False
    #: End of the first sampled reply in ``completion_ids`` (a ``reply_only`` branch keeps only that far).
    branch_end: Optional[int] = None
    #: The key of the grammar the seat's next reply is decoded under (``training.rollout.binding.grammar_key``; set
    #: by ``seat_prompt``: bound to each observation where ``SamplingConfig.bound_roles`` says).
    grammar: str = ""
    #: The grammar key of each reply in ``completion_ids``, in order (``training.rollout.grammar.trajectory_key``).
    reply_grammars: list[str] = field(default_factory=list)

    def context(self) -> list[int]:
        return self.prompt_ids + self.completion_ids


def load_frozen(seat_specs: Iterable[str], device: str = "auto", chat_template: Optional[str] = None,
                model_dirs: Iterable[tuple[str, str]] = ()) -> dict[str, PolicyModel]:
    """Load every ``model:NAME`` seat once (frozen opponents), each validated first
    (``training.model.validate``; ``chat_template`` serves tokenizers without one), from the local directory
    ``model_dirs`` gives NAME (the driver's resolution, ``RolloutSpec.model_dirs``), else from NAME."""
    from training.model.validate import validate_model

    where = dict(model_dirs)
    return {
        spec: PolicyModel(validate_model(where.get(spec[len(MODEL_PREFIX):], spec[len(MODEL_PREFIX):]),
                                         chat_template=chat_template), device=device, chat_template=chat_template)
        for spec in dict.fromkeys(seat_specs) if spec.startswith(MODEL_PREFIX)
    }


def play_shard(policy: PolicyModel, jobs: Sequence[EpisodeJob], spec: RolloutSpec, *, seed: Optional[int],
               frozen: Mapping[str, PolicyModel], weights_version: int, worker: str) -> list[RolloutRecord]:
    """One shard of a collect of ``spec``: its seats and limits, its sampling reseeded with the shard's ``seed``
    (what every backend plays, in its own process or a Ray worker)."""
    return play_jobs(policy, jobs, **spec.seats, sampling=spec.shard_sampling(seed), max_rounds=spec.max_rounds,
                     frozen=frozen, weights_version=weights_version, worker=worker)


def _scripted(spec: str, role: str, job: EpisodeJob):
    """The scripted agent of a ``scripted`` seat (for the Lab Manager, its policy name: ``episode_loop``
    builds it for the episode's scenario)."""
    seat = parse_seat(role, spec)
    if seat.kind != SCRIPTED:
        raise ValueError(f"{role} seat {spec!r} is not scripted")
    return scripted_agent(role, seat.arg, job.seed, job.template, job.difficulty)


def _env_ids(policy: PolicyModel, seat: ModelSeat) -> list[int]:
    """Token ids between the end of the seat's last reply and the next generation prompt.

    The last reply is rendered as a sentinel so the template's treatment of its text (stripping,
    say) cannot shift the boundary.
    """
    tok = policy.tokenizer
    messages = list(seat.chat.messages)
    messages[-2] = {"role": "assistant", "content": REPLY_SENTINEL}
    closed = tok.apply_chat_template(messages[:-1], tokenize=False, add_generation_prompt=False)
    opened = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    if not opened.startswith(closed) or REPLY_SENTINEL not in closed:
        raise RuntimeError("the chat template does not render an append-only chat")
    tail = closed[closed.rfind(REPLY_SENTINEL) + len(REPLY_SENTINEL):]
    end_token = tok.convert_ids_to_tokens(seat.completion_ids[-1]) if seat.last_finished else None
    if end_token and tail.startswith(end_token):
        tail = tail[len(end_token):]
    return tok.encode(tail + opened[len(closed):], add_special_tokens=False)


def seat_prompt(policy: PolicyModel, seat: ModelSeat, role: str, observation,
                sampling: SamplingConfig) -> list[int] | None:
    """Extend the ``role`` seat's chat with the new observation; None when the context window is full (then,
    and for every later turn of the seat, the turn is an invalid one and nothing is generated)."""
    seat.grammar = grammar_key(role, observation if role in sampling.bound_roles else None)
    if seat.exhausted:
        return None
    budget = dict(token_budget=policy.prompt_budget(sampling) // 2, count_tokens=policy.count_tokens)
    seat.chat.next_prompt(observation, **budget)
    if not seat.prompt_ids:
        seat.prompt_ids = policy.encode_chat(seat.chat.messages)
    else:
        env = _env_ids(policy, seat)
        seat.completion_ids += env
        seat.logprobs += [0.0] * len(env)
        seat.env_mask += [0] * len(env)
    ids = seat.context()
    seat.exhausted = len(ids) > policy.prompt_budget(sampling)
    return None if seat.exhausted else ids


def record_turn(seat: ModelSeat, g: Generation) -> None:
    seat.completion_ids += g.completion_ids
    seat.logprobs += g.logprobs
    seat.env_mask += [1] * len(g.completion_ids)
    seat.reply_grammars.append(seat.grammar)
    seat.chat.add_reply(g.text)
    seat.turns += 1
    seat.last_reply, seat.last_finished = g.text, g.finished


#: Row seeds: ``((sampling seed * ROW_SEED_JOB_STRIDE + job_id) * 2 + role) * ROW_SEED_TURN_STRIDE + turn``.
ROW_SEED_JOB_STRIDE = 1_000_003
ROW_SEED_TURN_STRIDE = 64


def row_seed(sampling_seed: int, job_id: int, role: str, turn: int) -> int:
    """The sampling seed of one model turn: a seat's ``turn``-th reply in job ``job_id`` of a collect seeded
    ``sampling_seed``.  Each turn draws from a stream of its own, whichever worker or batch plays it."""
    index = 0 if role == "scientist" else 1
    return (((sampling_seed * ROW_SEED_JOB_STRIDE + job_id) * 2 + index) * ROW_SEED_TURN_STRIDE + turn) % (2**63)


def play_jobs(
    policy: Optional[PolicyModel], jobs: Sequence[EpisodeJob], *, scientist: str, lab_manager: str,
    sampling: SamplingConfig, max_rounds: int = 6, frozen: Optional[Mapping[str, PolicyModel]] = None,
    weights_version: int = -1, worker: str = "inprocess",
) -> list[RolloutRecord]:
    """Play every job; return one RolloutRecord per job, in job order.  A job with an ``opponent`` plays it in
    the other role's seat (a scripted agent, or a model in ``frozen``: a ``model:`` seat or a snapshot).

    With a seeded ``sampling``, each model turn samples with its own ``row_seed`` (job, role, turn), so an
    episode plays the same in any batch and on any worker.  A job with a ``prefix`` replays those model turns
    first (``ModelTurn``s, in order) and samples from there.

    Each record's ``timing`` holds this call's ``generate_s`` (time inside model generation),
    ``total_s`` (the whole call) and ``started_at`` (its start, seconds since the epoch), for the step-time
    breakdown."""
    started_at, start = time.time(), time.perf_counter()
    generate_s = 0.0
    base = {"scientist": scientist, "lab_manager": lab_manager}
    per_job = [_job_seats(base, job) for job in jobs]
    models: dict[str, PolicyModel] = dict(frozen or {})
    if any(POLICY in specs.values() for specs in per_job):
        if policy is None:
            raise ValueError("a seat is 'policy' but no policy model was given")
        models[POLICY] = policy
    loops, pending, logs = [], {}, {}
    seats: list[dict[str, ModelSeat]] = []
    turns: list[list[ModelTurn]] = [[] for _ in jobs]
    for i, job in enumerate(jobs):
        agents = {}
        for role, spec in per_job[i].items():
            if spec in models:
                agents[role] = EXTERNAL
            elif spec.startswith(MODEL_PREFIX):
                raise ValueError(f"seat {spec!r} was not loaded; pass it in frozen=")
            else:
                agents[role] = _scripted(spec, role, job)
        seats.append({role: ModelSeat() for role, a in agents.items() if a == EXTERNAL})
        env = ReplicaLabEnv(max_rounds=max_rounds)
        loops.append(episode_loop(env, agents["scientist"], agents["lab_manager"], seed=job.seed,
                                  template=job.template, difficulty=job.difficulty))
        _advance(loops, i, None, pending, logs)
    def reply(i: int, g: Generation) -> None:
        role = pending[i].role
        seat = seats[i][role]
        record_turn(seat, g)
        turns[i].append(ModelTurn(role, tuple(g.completion_ids), tuple(g.logprobs), g.text, g.finished))
        if role == jobs[i].role and seat.branch_end is None and len(turns[i]) > len(jobs[i].prefix):
            seat.branch_end = len(seat.completion_ids)
        action = parse_action(g.text, role)
        seat.parse_failures += isinstance(action, InvalidAction)
        _advance(loops, i, action, pending, logs)

    while pending:
        by_model: dict[tuple[str, float | None], list[tuple[int, list[int]]]] = {}
        for i in sorted(pending):
            role = pending[i].role
            seat = seats[i][role]
            ids = seat_prompt(models[per_job[i][role]], seat, role, pending[i].observation, sampling)
            if ids is None:
                _advance(loops, i, InvalidAction(role=role, error=CONTEXT_EXHAUSTED), pending, logs)
                seat.parse_failures += 1
            elif len(turns[i]) < len(jobs[i].prefix):
                reply(i, _replayed(jobs[i].prefix[len(turns[i])], role, ids))
            else:
                branched = role == jobs[i].role and seat.branch_end is None
                if jobs[i].prefix and branched:
                    seat.prompt_ids, seat.completion_ids, seat.logprobs, seat.env_mask = ids, [], [], []
                    seat.reply_grammars = []
                temperature = jobs[i].reply_temperature if branched else None
                by_model.setdefault((per_job[i][role], temperature), []).append((i, ids))
        for (name, temperature), batch in by_model.items():
            tick = time.perf_counter()
            how = sampling if temperature is None else sampling.model_copy(update={"temperature": temperature})
            seeds = None if sampling.seed is None else [
                row_seed(sampling.seed, jobs[i].job_id, pending[i].role, seats[i][pending[i].role].turns)
                for i, _ in batch]
            outputs = models[name].generate_ids([ids for _, ids in batch], how, row_seeds=seeds,
                                                grammars=[seats[i][pending[i].role].grammar for i, _ in batch])
            generate_s += time.perf_counter() - tick
            for (i, _), g in zip(batch, outputs):
                reply(i, g)
    timing = {"generate_s": generate_s, "total_s": time.perf_counter() - start, "started_at": started_at}
    return [_record(job, logs[i], seats[i], per_job[i], weights_version, worker, timing, tuple(turns[i]))
            for i, job in enumerate(jobs)]


def _replayed(turn: ModelTurn, role: str, prompt_ids: list[int]) -> Generation:
    """A prefix's model turn as the generation it was (its seat must be the one whose turn it is)."""
    if turn.role != role:
        raise ValueError(f"a branch prefix replays a {turn.role} turn where the {role} plays: not this episode's")
    return Generation(text=turn.text, prompt_ids=prompt_ids, completion_ids=list(turn.completion_ids),
                      logprobs=list(turn.logprobs), finished=turn.finished)


def _job_seats(base: Mapping[str, str], job: EpisodeJob) -> dict[str, str]:
    """Role -> seat spec for one job: the collect's seats, the other role's replaced by the job's ``opponent``."""
    seats = dict(base)
    if job.opponent:
        seats[other_role(job.role)] = job.opponent
    return seats


def _record(job: EpisodeJob, log, seats: dict[str, ModelSeat], specs, version: int, worker: str,
            timing: dict, turns: tuple[ModelTurn, ...]) -> RolloutRecord:
    trajectory = None
    if specs[job.role] == POLICY:
        s = seats[job.role]
        cut = job.reply_only and s.branch_end is not None
        end = s.branch_end if cut else len(s.completion_ids)
        keys = s.reply_grammars[:1] if cut else s.reply_grammars
        trajectory = RoleTrajectory(
            role=job.role, prompt_ids=s.prompt_ids, completion_ids=s.completion_ids[:end], logprobs=s.logprobs[:end],
            env_mask=s.env_mask[:end], reward=role_reward(log, job.role), turns=s.turns, parse_failures=s.parse_failures,
            grammar=trajectory_key(keys) if keys else job.role,
        )
    return RolloutRecord(job=job, log=log, trajectory=trajectory, weights_version=version, worker=worker,
                         timing=timing, model_turns=turns)


def _advance(loops: list, index: int, action, pending: dict, logs: dict) -> None:
    try:
        request = next(loops[index]) if action is None else loops[index].send(action)
    except StopIteration as stop:
        pending.pop(index, None)
        logs[index] = stop.value
    else:
        pending[index] = request
