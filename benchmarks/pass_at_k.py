"""pass@k of a model Scientist on hard cells: can some of its k samples beat the naive Scientist?

    python benchmarks/pass_at_k.py [--model DIR] [--seeds 30] [--samples 16] [--temperature 1.0]

For each seed of the validation range (``replicalab.seeds.VALIDATION_SEEDS`` when it exists, else the
held-out range from 1,000,000) and each template's hard cell, the model plays ``--samples`` episodes
against the scripted Lab Manager at ``--temperature``; a sample *passes* when its total reward is above
the naive Scientist's on the same seed and cell.  pass@k is the unbiased estimate
``1 - C(n - c, k) / C(n, k)`` (n samples, c passing) averaged over seeds and cells, for k = 1, 4, 16:
the chance that the best of k samples beats naive, i.e. whether GRPO's groups of k hold an episode worth
learning from.  It also prints the decision: how often the model revises right after the Lab Manager
moves the technique vs after other suggestions, how many of those revisions run the paper's
cross-check technique and how many are the brief's cross-check protocol as written.  Last, the move's
factors on the reader Scientist's own technique-move turns (teacher-forced, the same seeds): the mean
probability of ``"revise_protocol"`` as the action type, of the ``,`` that continues it, of the cross-check
technique after ``"technique":`` and of its first item after ``"required_equipment":[``.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import statistics
import time

KS = (1, 4, 16)
#: The tokens after which the move's factors are read, in order of appearance in the reader's revision.
FACTOR_KEYS = ('"action_type":', '"revise_protocol"', '"technique":', '"required_equipment":[')
FACTOR_NAMES = ("revise", "continue the JSON", "cross-check technique", "its first equipment")
#: Episodes per batched ``play_jobs`` call (bounds the KV cache of one generation).
CHUNK = 96


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c pass (Chen et al., 2021)."""
    if k > n:
        raise ValueError(f"k={k} needs at least k samples, got {n}")
    return 1.0 if n - c < k else 1.0 - math.comb(n - c, k) / math.comb(n, k)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="checkpoint directory (default: the embedded default model)")
    parser.add_argument("--seeds", type=int, default=30, help="seeds per hard cell")
    parser.add_argument("--samples", type=int, default=16, help="episodes per seed and cell (n)")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--max-new-tokens", type=int, default=192)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    logging.basicConfig(level=logging.WARNING)
    import torch

    from replicalab import TEMPLATES, ReplicaLabEnv, run_episode, seeds
    from replicalab.agents import SCIENTIST_FACTORIES
    from replicalab.agents.brief import cross_check_method
    from training.config.model import SamplingConfig
    from replicalab.metrics import decision_turns
    from training.model.default import resolve_default_model
    from training.rollout.play import play_jobs
    from training.rollout.policy import PolicyModel
    from training.rollout.records import EpisodeJob

    torch.set_num_threads(int(os.environ.get("REPLICALAB_TORCH_THREADS", "2")))
    split, name = seeds.VALIDATION_SEEDS, "validation"
    seed_list = list(split[: args.seeds])
    cells = [(t, "hard") for t in TEMPLATES]
    env = ReplicaLabEnv()
    naive, method = {}, {}
    for seed in seed_list:
        for t, d in cells:
            naive[seed, t] = run_episode(env, SCIENTIST_FACTORIES["naive"](seed, t, d), seed=seed, template=t,
                                         difficulty=d).total_reward
            method[seed, t] = cross_check_method(env.reset(seed, t, d).scientist)
    path = args.model or str(resolve_default_model())
    policy = PolicyModel(path, device="cpu")
    sampling = SamplingConfig(temperature=args.temperature, max_new_tokens=args.max_new_tokens, seed=0)
    jobs = [EpisodeJob(job_id=i, seed=s, template=t, difficulty=d, role="scientist", group=g)
            for i, (s, (t, d), g) in enumerate((s, c, g) for s in seed_list for c in cells for g in range(args.samples))]
    started = time.perf_counter()
    logs = []
    for lo in range(0, len(jobs), CHUNK):
        records = play_jobs(policy, jobs[lo:lo + CHUNK], scientist="policy", lab_manager="scripted", sampling=sampling)
        logs += [r.log for r in records]
    elapsed = time.perf_counter() - started
    passes: dict[tuple[int, str], list[bool]] = {}
    rewards, decisions, to_technique, as_written, revisions_after_move = [], [], 0, 0, 0
    by_answer: dict[str, list[float]] = {"revised": [], "did not revise": []}
    invalid = [t.error is not None for log in logs for t in log.turns if t.role == "scientist"]
    for job, log in zip(jobs, logs):
        key = (job.seed, job.template)
        passes.setdefault(key, []).append(log.total_reward > naive[key] + 1e-9)
        rewards.append(log.total_reward)
        turns = decision_turns(log)
        decisions += turns
        revised_after_move = any(moved and revised for moved, revised in turns)
        by_answer["revised" if revised_after_move else "did not revise"].append(log.total_reward)
        if revised_after_move:
            revisions_after_move += 1
            revised = [t.action for t in log.turns if t.role == "scientist" and t.action
                       and t.action.get("action_type") == "revise_protocol"]
            want = method[key]
            to_technique += any(a.get("technique") == want["technique"] for a in revised)
            as_written += any(all(a.get(f) == v for f, v in want.items()) for a in revised)
    print(f"model {path}; {name} seeds {seed_list[0]}..{seed_list[-1]} x {', '.join(t for t, _ in cells)} (hard); "
          f"{args.samples} samples each at temperature {args.temperature}; {len(jobs)} episodes in {elapsed:.0f} s")
    print(f"  mean reward {statistics.fmean(rewards):.2f}; naive on the same seeds {statistics.fmean(naive.values()):.2f}")
    print("  mean reward of the episodes that " + "; ".join(
        f"{answer} after a technique move {statistics.fmean(v) if v else float('nan'):.2f} ({len(v)})"
        for answer, v in by_answer.items()) + f"; invalid Scientist turns {statistics.fmean(invalid):.3f}")
    for k in KS:
        if k <= args.samples:
            value = statistics.fmean(pass_at_k(len(v), sum(v), k) for v in passes.values())
            print(f"  pass@{k:<2} (beats naive) {value:.3f}")
    for moved, label in ((True, "after a technique move"), (False, "after other suggestions")):
        values = [revised for m, revised in decisions if m == moved]
        rate = statistics.fmean(values) if values else float("nan")
        print(f"  revise rate {label:<24} {rate:.3f} over {len(values)} turns")
    print(f"  episodes revising after a technique move: {revisions_after_move}; to the cross-check technique "
          f"{to_technique}; the cross-check protocol as written {as_written}")
    factors = move_factors(policy, seed_list, TEMPLATES)
    print("  the reader's move, teacher-forced: " + "; ".join(
        f"P({name}) {statistics.fmean(v):.3f}" for name, v in factors.items() if v)
        + f" over {len(factors[FACTOR_NAMES[0]])} turns")


def move_factors(policy, seed_list: list[int], templates) -> dict[str, list[float]]:
    """Teacher-forced probability of each step of the reader's revision (``FACTOR_NAMES``) at its
    technique-move turns on the hard cells of ``seed_list``."""
    import torch

    from training.model.sft_data import follows_technique_move, record_episode

    tok, model = policy.tokenizer, policy.model
    out: dict[str, list[float]] = {name: [] for name in FACTOR_NAMES}
    for seed in seed_list:
        for template in templates:
            turns, _, _ = record_episode(seed, template, "hard", scientist="reader")
            for turn in turns[1:]:
                target = turn["completion"][0]["content"]
                if not follows_technique_move(turn) or '"revise_protocol"' not in target:
                    continue
                prompt = policy.encode_chat(turn["prompt"])
                ids = tok.encode(target, add_special_tokens=False)
                pieces = [tok.decode([i]) for i in ids]
                with torch.no_grad():
                    logits = model(torch.tensor([prompt + ids], device=model.device)).logits[0]
                probs = logits.float().softmax(-1)
                for name, key in zip(FACTOR_NAMES, FACTOR_KEYS):
                    if key in pieces:
                        k = pieces.index(key) + 1
                        out[name].append(probs[len(prompt) + k - 1, ids[k]].item())
    return out


if __name__ == "__main__":
    main()
