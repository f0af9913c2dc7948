"""How reliably a model copies the published sample size into its opening proposal, for every sample
size a domain can draw, next to how often that number was a sample size in the model's training data.

    python benchmarks/copy_probe.py [--model DIR] [--seeds 3]

For each template and validation seed, the Scientist's opening prompt is rebuilt once per integer ``n`` in
the domain's ``sample_size_range``, with ``n`` written into the brief (the published protocol and the
key finding); the model scores the tokens of ``n`` right after the opening's ``"sample_size":``.  The
report groups the numbers by how many training episodes had them as the published sample size (from the
model's ``build_info.json``): a copy that works only for numbers the model has seen shows up as low
probabilities in the rarely seen groups.  Greedy decoding writes a wrong sample size where P < 0.5 can
lose to another number.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
from collections import Counter
from pathlib import Path

SAMPLE_SIZE_KEY = '"sample_size":'
#: Below this probability greedy decoding may write another number.
WEAK_COPY = 0.5
#: Training-count groups: (low, high) inclusive.
COUNT_GROUPS = ((0, 0), (1, 2), (3, 5), (6, 10**9))


def training_counts(model_dir: Path) -> Counter:
    """(template, sample size) -> how many training episodes published it (seeds from build_info.json)."""
    from replicalab import DIFFICULTIES, TEMPLATES, generate_scenario

    info_path = model_dir / "build_info.json"
    if not info_path.exists():
        return Counter()
    seeds = json.loads(info_path.read_text())["transcripts"]["seeds"]
    return Counter((t, generate_scenario(s, t, d).paper_protocol.sample_size)
                   for s in seeds for t in TEMPLATES for d in DIFFICULTIES)


def with_sample_size(obs, n: int):
    """The observation with its brief's published sample size (and the key finding's) replaced by n."""
    from replicalab.scenario_records import PUBLISHED_MARKER

    head, published = obs.paper_method.split(PUBLISHED_MARKER)
    stated = json.loads(published)
    old = stated["sample_size"]
    stated["sample_size"] = n
    method = f"{head}{PUBLISHED_MARKER} {json.dumps(stated, separators=(',', ':'))}"
    finding = re.sub(rf"\b{old}\b", str(n), obs.paper_key_finding)
    return obs.model_copy(update={"paper_method": method, "paper_key_finding": finding})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="checkpoint directory (default: the embedded default model)")
    parser.add_argument("--seeds", type=int, default=3, help="validation seeds per template (easy cells)")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from replicalab import TEMPLATES, VALIDATION_SEEDS, ReplicaLabEnv
    from replicalab.agents import SCIENTIST_FACTORIES
    from replicalab.parsing import format_action
    from replicalab.prompts import RoleChat
    from replicalab.scenarios import DOMAINS
    from training.model.default import resolve_default_model

    path = Path(args.model) if args.model else resolve_default_model()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    counts = training_counts(path)
    probs: dict[tuple[str, int], list[float]] = {}
    for template in TEMPLATES:
        low, high = DOMAINS[template].sample_size_range
        for seed in list(VALIDATION_SEEDS)[: args.seeds]:
            base = ReplicaLabEnv().reset(seed=seed, template=template, difficulty="easy").scientist
            opening = format_action(SCIENTIST_FACTORIES["naive"](seed, template, "easy")(base))
            prefix = opening[: opening.index(SAMPLE_SIZE_KEY) + len(SAMPLE_SIZE_KEY)]
            for n in range(low, high + 1):
                chat = RoleChat().next_prompt(with_sample_size(base, n))
                ids = list(tokenizer.apply_chat_template(chat, tokenize=True, return_dict=False,
                                                         add_generation_prompt=True))
                ids += tokenizer.encode(prefix, add_special_tokens=False)
                target = tokenizer.encode(str(n), add_special_tokens=False)
                with torch.no_grad():
                    logp = model(torch.tensor([ids + target])).logits[0, len(ids) - 1:-1].log_softmax(-1)
                p = logp.gather(1, torch.tensor(target)[:, None]).sum().exp().item()
                probs.setdefault((template, n), []).append(p)
    print(f"model {path}; validation seeds {VALIDATION_SEEDS.start}..{VALIDATION_SEEDS.start + args.seeds - 1}, "
          f"easy cells; P(the opening copies the published sample size)")
    print(f"  {'template':<24}{'range':>10}{'mean P':>9}{'min P':>8}{'weak (P<0.5)':>14}")
    for template in TEMPLATES:
        mine = {n: statistics.fmean(v) for (t, n), v in probs.items() if t == template}
        weak = sorted(n for n, p in mine.items() if p < WEAK_COPY)
        low, high = DOMAINS[template].sample_size_range
        print(f"  {template:<24}{f'{low}..{high}':>10}{statistics.fmean(mine.values()):>9.3f}"
              f"{min(mine.values()):>8.3f}{len(weak):>14}  {weak[:12]}{' ...' if len(weak) > 12 else ''}")
    print("  by how often the number was a published sample size in training (same template):")
    for lo, hi in COUNT_GROUPS:
        group = [statistics.fmean(v) for (t, n), v in probs.items() if lo <= counts[(t, n)] <= hi]
        if group:
            label = f"{lo}" if lo == hi else (f"{lo}-{hi}" if hi < 10**9 else f">={lo}")
            print(f"    seen {label:>5} times: {len(group):>4} numbers, mean P {statistics.fmean(group):.3f}, "
                  f"weak {sum(p < WEAK_COPY for p in group)}")


if __name__ == "__main__":
    main()
