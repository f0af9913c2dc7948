"""How likely a model is to revise where the reader Scientist would: its probability of writing
``"revise_protocol"`` as the action type right after the Lab Manager suggests a change, split by
whether the suggestion moves the plan to another technique (where revising to the paper's
cross-check method pays on hard cells) or only changes other fields (where it does not).

    python benchmarks/decision_probe.py [--model DIR] [--seeds 10]

The Scientist's chats come from the reader Scientist playing the scripted Lab Manager on validation
seeds (medium and hard cells), in the rollouts' append-only chat format; the model scores the next
token after ``{"action_type":`` at each turn that answers a suggestion.  A warm start GRPO can
improve on hard cells puts clearly more probability on revising after a technique move than after
other suggestions.
"""

from __future__ import annotations

import argparse
import os
import statistics

ACTION_PREFIX = '{"action_type":'
REVISE = '"revise_protocol"'
DIFFICULTIES = ("medium", "hard")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="checkpoint directory (default: the embedded default model)")
    parser.add_argument("--seeds", type=int, default=10, help="validation seeds per template x difficulty")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from replicalab import TEMPLATES, VALIDATION_SEEDS
    from replicalab.render import suggestion_in
    from training.model.default import resolve_default_model
    from training.model.sft_data import follows_technique_move, record_episode

    path = args.model or str(resolve_default_model())
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    revise = tokenizer.encode(REVISE, add_special_tokens=False)
    prefix = tokenizer.encode(ACTION_PREFIX, add_special_tokens=False)
    if len(revise) != 1:
        raise SystemExit(f"{REVISE} is {len(revise)} tokens in this tokenizer; the probe needs a single token")
    probs: dict[bool, list[float]] = {True: [], False: []}
    for seed in list(VALIDATION_SEEDS)[: args.seeds]:
        for template in TEMPLATES:
            for difficulty in DIFFICULTIES:
                turns, _, _ = record_episode(seed, template, difficulty, scientist="reader")
                for turn in turns[1:]:
                    if not suggestion_in(turn["prompt"][-1]["content"]):
                        continue
                    ids = tokenizer.apply_chat_template(turn["prompt"], tokenize=True, return_dict=False,
                                                        add_generation_prompt=True)
                    with torch.no_grad():
                        logits = model(torch.tensor([list(ids) + prefix])).logits[0, -1]
                    probs[follows_technique_move(turn)].append(logits.softmax(-1)[revise[0]].item())
    print(f"model {path}; validation seeds {VALIDATION_SEEDS.start}..{VALIDATION_SEEDS.start + args.seeds - 1}, "
          f"{', '.join(DIFFICULTIES)} cells, reader Scientist's chats")
    for moved, label in ((True, "after a technique move"), (False, "after other suggestions")):
        values = probs[moved]
        mean = statistics.fmean(values) if values else float("nan")
        print(f"  P(revise_protocol) {label:<24} {mean:.3f} over {len(values)} turns")


if __name__ == "__main__":
    main()
