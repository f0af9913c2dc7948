"""How much of a turn-synchronous batched play's decoding serves rows that have already finished.

The play loop decodes every pending episode's turn of a seat as one ``generate`` call, which runs until its
longest reply ends: one reply that never closes its turn holds the whole batch to ``max_new_tokens``.  This probe
plays validation episodes with a model Scientist and reports, over the ``generate`` calls, the decode steps, the
steps spent in calls where some row hit the cap, and the share of row-steps that produced a kept token.

    python benchmarks/decode_waste.py --model artifacts/default-model --episodes 90 --max-new-tokens 256 128
"""

from __future__ import annotations

import argparse


def measure(model: str, episodes: int, temperature: float, max_new_tokens: int, seed: int = 0) -> dict[str, float]:
    """Play ``episodes`` validation jobs (Scientist = the model, Lab Manager scripted) and count decode steps."""
    import time

    from replicalab.scenarios import DIFFICULTIES, TEMPLATES
    from training.config.model import SamplingConfig
    from training.rollout.play import play_jobs
    from training.rollout.policy import PolicyModel
    from training.rollout.records import validation_slice

    policy = PolicyModel(model, device="cpu")
    sampling = SamplingConfig(do_sample=True, temperature=temperature, seed=seed, max_new_tokens=max_new_tokens)
    cap = policy.max_new_tokens(sampling)
    calls: list[tuple[int, list[int]]] = []
    generate = policy.generate_ids

    def counted(prompts, how, **kwargs):
        out = generate(prompts, how, **kwargs)
        calls.append((len(prompts), [len(g.completion_ids) for g in out]))
        return out

    policy.generate_ids = counted
    started = time.perf_counter()
    records = play_jobs(policy, validation_slice(episodes, TEMPLATES, DIFFICULTIES), scientist="policy",
                        lab_manager="scripted", sampling=sampling)
    seconds = time.perf_counter() - started
    steps = sum(max(lengths) for _, lengths in calls)
    return {"generate_calls": len(calls), "decode_steps": steps,
            "steps_in_calls_at_the_cap": sum(max(lengths) for _, lengths in calls if max(lengths) >= cap),
            "row_step_use": sum(sum(lengths) for _, lengths in calls) / max(1, sum(n * max(lengths) for n, lengths in calls)),
            "cap": cap, "seconds": seconds,
            "mean_reward": sum(r.log.total_reward for r in records) / len(records)}


def reply_lengths(model: str, seeds: int) -> dict[str, int]:
    """The longest reply, in ``model``'s tokens, that the naive and the all-skills Scientist and the scripted Lab
    Manager write on ``seeds`` validation seeds per cell: what a reply budget must hold."""
    from transformers import AutoTokenizer

    from replicalab import ReplicaLabEnv, run_episode
    from replicalab.models import LabManagerAction, ScientistAction
    from replicalab.parsing import format_action
    from replicalab.scenarios import DIFFICULTIES, TEMPLATES
    from replicalab.seats import scripted_scientist
    from replicalab.seeds import split_seeds

    tokenizer = AutoTokenizer.from_pretrained(model)
    longest = {"scientist": 0, "lab_manager": 0}
    for name in ("naive", "reader+defender+asker"):
        for seed in split_seeds("validation", seeds):
            for template in TEMPLATES:
                for difficulty in DIFFICULTIES:
                    agent = scripted_scientist(name, seed=seed, template=template, difficulty=difficulty)
                    log = run_episode(ReplicaLabEnv(), agent, seed=seed, template=template, difficulty=difficulty)
                    for turn in log.turns:
                        if turn.action is not None:
                            kind = ScientistAction if turn.role == "scientist" else LabManagerAction
                            size = len(tokenizer(format_action(kind(**turn.action)))["input_ids"])
                            longest[turn.role] = max(longest[turn.role], size)
    return longest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="artifacts/default-model")
    ap.add_argument("--episodes", type=int, default=90)
    ap.add_argument("--temperature", type=float, default=0.5)
    ap.add_argument("--max-new-tokens", type=int, nargs="+", default=[256, 128])
    args = ap.parse_args()
    print("longest scripted reply (tokens):", reply_lengths(args.model, 30))
    for cap in args.max_new_tokens:
        found = measure(args.model, args.episodes, args.temperature, cap)
        print(", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in found.items()))


if __name__ == "__main__":
    main()
