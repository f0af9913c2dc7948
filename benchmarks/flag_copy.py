"""Whether a model's Lab Manager seat copies each of the lab's flags from the check in its prompt.

    python benchmarks/flag_copy.py [--model DIR ...] [--seeds 3]

The Lab Manager writes its five flags first, each the lab's check of the plan on the table, which its prompt ends
with (``plan_check``, rendered as the same JSON tokens).  On validation seeds (every template x difficulty), the
Lab Manager's views of scripted episodes (the naive and the all-skills Scientist against the thrifty and the
cooperative lab), each model scores every flag teacher-forced (the true flags before it): the probability of the
lab's value against the other, each the probability of the whole field's tokens (``"budget_ok":false,`` is one token
or a key and its value, as the model's tokenizer has it), per flag and per value.  A flag copied by the check reads
1.00 for both values; a seat that writes a prior instead reads the value's share of the data for one value and far
below 0.5 for the other -- the turns a sampled seat then gets wrong (``replicalab bench lab-manager``, true flags).
"""

from __future__ import annotations

import argparse
from collections import defaultdict

SCIENTISTS = ("naive", "reader+defender+asker")
LABS = ("thrifty", "cooperative")
#: Below this probability of the lab's value, greedy decoding writes the other one.
WRONG = 0.5


def flags() -> list[str]:
    """The five flags in the order the Lab Manager writes them (``parsing.field_order``)."""
    from replicalab.models import LabManagerAction
    from replicalab.parsing import field_order

    return [name for name in field_order(LabManagerAction) if name.endswith("_ok")]


def lab_manager_views(seeds: list[int]) -> list:
    """The Lab Manager's views, with a plan on the table, of scripted episodes on ``seeds`` x every cell."""
    from replicalab import ReplicaLabEnv, run_episode
    from replicalab.episode import replayed_views
    from replicalab.models import LabManagerObservation
    from replicalab.scenarios import cells
    from replicalab.seats import scripted_agent

    env, views = ReplicaLabEnv(), []
    for template, difficulty in cells():
        for seed in seeds:
            for name in SCIENTISTS:
                for lab in LABS:
                    log = run_episode(env, scripted_agent("scientist", name, seed, template, difficulty), lab,
                                      seed=seed, template=template, difficulty=difficulty)
                    views += [view for _, view in replayed_views(log)
                              if isinstance(view, LabManagerObservation) and view.plan_check]
    return views


def flag_probabilities(path: str, views: list) -> dict[tuple[str, bool], list[float]]:
    """(flag, the lab's value) -> the model's probability of that value, per view, teacher-forced."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from replicalab.prompts import build_messages

    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    out: dict[tuple[str, bool], list[float]] = defaultdict(list)
    for view in views:
        text = tokenizer.apply_chat_template(build_messages(view), add_generation_prompt=True, tokenize=False) + "{"
        for flag in flags():
            truth = not view.plan_check[flag]
            start = len(tokenizer.encode(text, add_special_tokens=False))
            value = {}
            for v in (True, False):  # the whole field's tokens: one, or a key and its value
                ids = tokenizer.encode(text + f'"{flag}":{str(v).lower()},', add_special_tokens=False)
                with torch.no_grad():
                    logp = model(torch.tensor([ids])).logits[0, start - 1:-1].log_softmax(-1)
                value[v] = logp.gather(1, torch.tensor(ids[start:])[:, None]).sum().exp().item()
            out[(flag, truth)].append(value[truth] / (value[True] + value[False]))
            text += f'"{flag}":{str(truth).lower()},'
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", action="append", default=None, help="checkpoint directory (repeatable; "
                        "default: the embedded default model)")
    parser.add_argument("--seeds", type=int, default=3, help="validation seeds per cell")
    args = parser.parse_args()

    from replicalab.seeds import VALIDATION_SEEDS
    from training.errors import UserInputError
    from training.model.default import resolve_default_model
    from training.model.model_path import check_model_path

    try:  # checked before anything plays: a bad one stops the script with one line
        paths = [check_model_path(name) for name in args.model or []] or [str(resolve_default_model())]
    except UserInputError as err:
        raise SystemExit(f"--model: {err}") from None
    views = lab_manager_views(list(VALIDATION_SEEDS[:args.seeds]))
    print(f"{len(views)} Lab Manager views with a plan on the table (validation seeds x every cell; "
          f"{', '.join(SCIENTISTS)} x {', '.join(LABS)}): P(the lab's value | the true flags before it), "
          f"and the share of views where it is below {WRONG}")
    print("\n| model | " + " | ".join(f"{flag} {value}" for flag in flags() for value in ("true", "false")) + " |")
    print("|---" * (1 + 2 * len(flags())) + "|")
    for path in paths:
        probs = flag_probabilities(path, views)
        cells = []
        for flag in flags():
            for value in (True, False):
                p = probs.get((flag, value), [])
                cells.append(f"{sum(p) / len(p):.3f} ({sum(x < WRONG for x in p) / len(p):.2f} of {len(p)})"
                             if p else "-")
        print(f"| {path} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
