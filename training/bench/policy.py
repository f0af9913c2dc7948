"""``replicalab bench policy``: what a model Scientist's policy holds before (or after) training, on validation seeds.

With the prompt every model sees (no ready-made reply), against one scripted Lab Manager, on every template x
difficulty x ``--seeds`` validation seeds:

- **sampled play**: ``--samples`` episodes per seed and cell at ``--temperature``; the mean reward per cell next to
  the scripted baselines on the same episodes (naive, the reader, all skills); **pass@k**, the chance that the best
  of k samples beats the naive Scientist on the same episode (unbiased estimate, Chen et al. 2021), i.e. whether a
  GRPO group of k holds an episode worth learning from; and each skill's **use rate** where its trigger shows
  (``replicalab.skill_use``);
- **the decision, teacher-forced**: at every chance of every skill in the all-skills Scientist's own chats, the
  model's probability of the skill's action type after ``{"action_type":`` and its mean per-token probability of
  the skill's whole reply (the probability that sampling takes the skill where it pays), with each field of that
  reply's own probability given what the reply wrote before it (where a skill's content is lost: a field far below
  1 is one the seat cannot yet write, whatever its decision); and the same action-type
  probability at the chances in the naive Scientist's chats, where the history so far holds no skill (a policy
  that infers a persona from the history takes the skill less there).

Baselines (the scripted Scientists) are played in the same run.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections import defaultdict

from replicalab.lab import LAB_POLICIES
from replicalab.skill_use import skill_chances
from training.argtypes import positive_float, positive_int

KS = (1, 4, 8)
ACTION_PREFIX = '{"action_type":'
BASELINES = ("naive", "reader", "reader+defender+asker")
#: Whose chats the decision is read in: the skilled Scientist's own, and the naive one's (the same chances after a
#: history without skills: a warm start that infers its persona from the history uses the skill less there).
HISTORIES = ("reader+defender+asker", "naive")
#: The action type each skill writes at its chance.
SKILL_ACTION = {"read": "revise_protocol", "defend": "revise_protocol", "ask": "request_info"}
#: Episodes per batched ``play_jobs`` call (bounds the KV cache of one generation).
CHUNK = 96


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=None, help="checkpoint directory (default: the embedded default model)")
    parser.add_argument("--seeds", type=positive_int, default=10, help="validation seeds per cell")
    parser.add_argument("--samples", type=positive_int, default=8, help="sampled episodes per seed and cell (n)")
    parser.add_argument("--temperature", type=positive_float, default=1.0)
    parser.add_argument("--lab", default="thrifty", choices=LAB_POLICIES, help="scripted Lab Manager policy")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c pass."""
    if k > n:
        raise ValueError(f"k={k} needs at least k samples, got {n}")
    return 1.0 if n - c < k else 1.0 - math.comb(n - c, k) / math.comb(n, k)


def decision_probabilities(policy, episodes) -> dict[str, dict[str, list[float]]]:
    """``{skill: {"action_type": [...], "reply": [...]}}`` over the skill's chances in ``episodes`` (``(chat examples,
    log)`` of a scripted Scientist): the model's probability of the skill's action type (``SKILL_ACTION``) after
    ``{"action_type":``, and, where the recorded turn is the skill's own reply, its mean per-token probability."""
    out: dict[str, dict[str, list[float]]] = defaultdict(lambda: {"action_type": [], "reply": []})
    for examples, log in episodes:
        for chance in skill_chances(log):
            turn = examples[chance.turn]
            prompt = policy.encode_chat(turn["prompt"])
            head = f'{ACTION_PREFIX}"{SKILL_ACTION[chance.skill]}",'
            logp, ends = _reply_logprobs(policy, prompt, head)
            out[chance.skill]["action_type"].append(_span_probability(logp, ends, len(ACTION_PREFIX), len(head) - 1))
            if chance.used:
                reply = turn["completion"][0]["content"]
                logp, ends = _reply_logprobs(policy, prompt, reply)
                out[chance.skill]["reply"].append(math.exp(statistics.fmean(logp)))
                for field, p in field_probabilities(reply, logp, ends).items():
                    out[chance.skill].setdefault(f"field:{field}", []).append(p)
    return out


def field_probabilities(reply: str, logp: list[float], ends: list[int]) -> dict[str, float]:
    """``{field: P(its value | the reply before it)}`` of a compact JSON ``reply`` (``format_action``'s spelling),
    from the log-probabilities ``logp`` of its tokens ending at characters ``ends`` (``_reply_logprobs``): a token
    that straddles a value's edge counts toward it."""
    out = {}
    for field, value in json.loads(reply).items():
        written = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        start = reply.index(f'"{field}":{written}') + len(field) + 3
        out[field] = _span_probability(logp, ends, start, start + len(written))
    return out


def _span_probability(logp: list[float], ends: list[int], start: int, end: int) -> float:
    """The probability of the characters ``start:end`` of a text whose tokens end at ``ends`` with log-probabilities
    ``logp``: the product over every token that overlaps them."""
    return math.exp(sum(lp for i, lp in enumerate(logp) if ends[i] > start and (ends[i - 1] if i else 0) < end))


def _reply_logprobs(policy, prompt: list[int], text: str) -> tuple[list[float], list[int]]:
    """The model's log-probability of each token of ``text`` after ``prompt``, and the character end of each token
    (whatever way this tokenizer splits the text)."""
    import torch

    tok, model = policy.tokenizer, policy.model
    ids = tok.encode(text, add_special_tokens=False)
    with torch.no_grad():
        logits = model(torch.tensor([prompt + ids], device=model.device)).logits[0].float()
    targets = torch.tensor(ids, device=logits.device)[:, None]
    logp = logits.log_softmax(-1)[len(prompt) - 1:-1].gather(1, targets)[:, 0].tolist()
    return logp, [len(tok.decode(ids[:i + 1])) for i in range(len(ids))]


def sampled_jobs(grid, samples: int, role: str) -> list:
    """``samples`` jobs of ``role`` per (seed, template, difficulty) of ``grid``, job ids in order, one group each."""
    from training.rollout.records import EpisodeJob

    return [EpisodeJob(job_id=i, seed=s, template=t, difficulty=d, role=role, group=g)
            for i, ((s, t, d), g) in enumerate((e, g) for e in grid for g in range(samples))]


def play_logs(policy, jobs: list, *, scientist: str, lab_manager: str, sampling) -> list:
    """The EpisodeLogs of ``jobs`` played by ``play_jobs``, ``CHUNK`` episodes per batched call."""
    from training.rollout.play import play_jobs

    return [r.log for lo in range(0, len(jobs), CHUNK)
            for r in play_jobs(policy, jobs[lo:lo + CHUNK], scientist=scientist, lab_manager=lab_manager,
                               sampling=sampling)]


def run(args: argparse.Namespace) -> int:
    import torch

    from replicalab import ReplicaLabEnv, run_episode
    from replicalab.agents import SCIENTIST_FACTORIES, SKILLS
    from replicalab.scenarios import cells
    from replicalab.seeds import VALIDATION_SEEDS
    from replicalab.skill_use import skill_use
    from training.config.model import SamplingConfig
    from training.model.default import resolve_default_model
    from training.model.model_path import check_model_path
    from training.model.sft_data import record_episode
    from training.rollout.policy import PolicyModel

    seeds = list(VALIDATION_SEEDS[:args.seeds])
    grid = [(s, t, d) for t, d in cells() for s in seeds]
    env = ReplicaLabEnv()
    scripted = {name: [run_episode(env, SCIENTIST_FACTORIES[name](s, t, d), args.lab, seed=s, template=t, difficulty=d)
                       for s, t, d in grid] for name in BASELINES}
    naive = {(log.seed, log.scenario_template, log.difficulty): log.total_reward for log in scripted["naive"]}
    path = check_model_path(args.model) if args.model else str(resolve_default_model())
    policy = PolicyModel(path, device="cpu")
    sampling = SamplingConfig(do_sample=True, temperature=args.temperature, seed=0)
    jobs = sampled_jobs(grid, args.samples, "scientist")
    print(f"replicalab bench policy: {path}; validation seeds {seeds[0]}..{seeds[-1]} x every template x difficulty "
          f"against scripted:{args.lab}; {args.samples} samples per episode at temperature {args.temperature} "
          f"({len(jobs)} episodes); torch threads {torch.get_num_threads()}")
    started = time.perf_counter()
    logs = play_logs(policy, jobs, scientist="policy", lab_manager=f"scripted:{args.lab}", sampling=sampling)
    print(f"played in {time.perf_counter() - started:.0f} s")
    by_cell: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    passes: dict[tuple[int, str, str], list[bool]] = defaultdict(list)
    for log in logs:
        key = (log.seed, log.scenario_template, log.difficulty)
        by_cell[key[1:]]["model"].append(log.total_reward)
        passes[key].append(log.total_reward > naive[key] + 1e-9)
    for name, played in scripted.items():
        for log in played:
            by_cell[log.scenario_template, log.difficulty][name].append(log.total_reward)
    columns = ["model (sampled)", *BASELINES]
    lines = ["", "Mean reward per cell", "", "| cell | " + " | ".join(columns) + " | model pass@1 / @4 / @8 |",
             "|---" * (len(columns) + 2) + "|"]
    for t, d in cells():
        cell_passes = [v for (s, tt, dd), v in passes.items() if (tt, dd) == (t, d)]
        ks = " / ".join(f"{statistics.fmean(pass_at_k(len(v), sum(v), k) for v in cell_passes):.2f}"
                        for k in KS if k <= args.samples)
        lines.append(f"| {t} {d} | " + " | ".join(f"{statistics.fmean(by_cell[t, d][n]):.2f}"
                                                   for n in ("model", *BASELINES)) + f" | {ks} |")
    overall = {n: statistics.fmean(r for c in by_cell.values() for r in c[n]) for n in ("model", *BASELINES)}
    lines.append("| all cells | " + " | ".join(f"{overall[n]:.2f}" for n in ("model", *BASELINES)) + " | " + " / ".join(
        f"{statistics.fmean(pass_at_k(len(v), sum(v), k) for v in passes.values()):.2f}" for k in KS if k <= args.samples)
        + " |")
    print("\n".join(lines))
    use = skill_use(logs)
    full = skill_use(scripted["reader+defender+asker"])
    print("\nSkill use where its trigger shows (used / chances): model sampled | all-skills Scientist")
    for skill in SKILLS:
        (u, c), (fu, fc) = use[skill], full[skill]
        print(f"  {skill:<7} {u / c if c else float('nan'):.3f} ({u}/{c}) | {fu / fc if fc else float('nan'):.3f} ({fu}/{fc})")
    for history in HISTORIES:
        recorded = [record_episode(s, t, d, scientist=history)[::2] for s, t, d in grid]
        probs = decision_probabilities(policy, recorded)
        print(f"\nAt the skills' chances in the {history} Scientist's chats (teacher-forced): P(the skill's action "
              "type) | mean per-token P(the skill's whole reply, where the chat's turn is it)")
        for skill in SKILLS:
            p = probs.get(skill, {"action_type": [], "reply": []})
            reply = f"{statistics.fmean(p['reply']):.3f}" if p["reply"] else "-"
            print(f"  {skill:<7} {statistics.fmean(p['action_type']):.3f} | {reply} over {len(p['action_type'])} turns"
                  if p["action_type"] else f"  {skill:<7} no chances on these seeds")
            fields = {k.removeprefix("field:"): statistics.fmean(v) for k, v in p.items() if k.startswith("field:")}
            if fields:
                print("          each field of the skill's reply, P(it | the reply before it): " + ", ".join(
                    f"{name} {prob:.2f}" for name, prob in fields.items() if name != "action_type"))
    return 0
