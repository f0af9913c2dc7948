"""replicalab bench generate-memory: peak memory of one batched generation turn, full-vocabulary logits
buffer (the old way) vs step-by-step log-probs (``PolicyModel``).

A tiny random-weight Qwen2 model with a large vocabulary (default 150k tokens, like Qwen2.5's) generates
one batched turn on CPU (default batch 64, 256 new tokens; the stop token is one of 150k near-uniform choices, so
almost every answer runs to the limit) in each of two fresh subprocesses, so the peaks do not mix:

- ``logits``: ``generate(output_logits=True)`` then ``log_softmax`` per step (a float32 copy of every step's
  ``batch x vocab`` logits is kept until the turn ends: about ``batch * new_tokens * vocab * 4`` bytes);
- ``steps``: ``PolicyModel.generate_ids`` (the configured warpers, then ``StepLogprobs``: one ``batch x
  vocab`` buffer at a time).

Each prints its peak resident set size (``resource.getrusage(...).ru_maxrss``: tracemalloc does not see
torch's allocations) and the growth of that peak over the process after loading the model and generating
one warm-up token.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from typing import Optional, Sequence

from training.argtypes import positive_int

#: Model shape: tiny everywhere except the vocabulary (the logits buffer scales with it).
HIDDEN = 64
PROMPT_TOKENS = 32
MODES = ("logits", "steps")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--vocab", type=positive_int, default=150_000, help="vocabulary size (default 150000)")
    parser.add_argument("--batch", type=positive_int, default=64, help="conversations per turn (default 64)")
    parser.add_argument("--new-tokens", type=positive_int, default=256, help="tokens per answer (default 256)")
    parser.add_argument("--mode", choices=MODES, default=None, help=argparse.SUPPRESS)  # one subprocess's run


def _maxrss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux reports KiB


def _measure(mode: str, vocab: int, batch: int, new_tokens: int) -> dict[str, float]:
    """One turn in this process; the peak RSS and its growth over the loaded, warmed-up model."""
    import torch
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    from training.config.model import SamplingConfig
    from training.rollout.policy import PolicyModel

    torch.manual_seed(0)
    torch.set_num_threads(1)
    config = Qwen2Config(vocab_size=vocab, hidden_size=HIDDEN, intermediate_size=2 * HIDDEN, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=4 * new_tokens + 64,
                         tie_word_embeddings=True)
    model = Qwen2ForCausalLM(config)
    stop = vocab - 1
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"<stop>": stop}, "<stop>")),
                                        eos_token="<stop>")
    policy = PolicyModel(model=model, tokenizer=tokenizer, device="cpu")
    sampling = SamplingConfig(max_new_tokens=new_tokens, seed=0)
    prompts = [[(7 * i + j) % (vocab - 1) for j in range(PROMPT_TOKENS)] for i in range(batch)]
    policy.generate_ids(prompts[:1], sampling.model_copy(update={"max_new_tokens": 1}))
    base = _maxrss_mb()
    if mode == "steps":
        out = policy.generate_ids(prompts, sampling)
        tokens = sum(len(g.completion_ids) for g in out)
    else:
        tokens = _old_way(policy, prompts, sampling)
    peak = _maxrss_mb()
    return {"mode": mode, "peak_rss_mb": round(peak, 1), "growth_mb": round(peak - base, 1), "tokens": tokens}


def _old_way(policy, prompts, sampling) -> int:
    """The previous ``PolicyModel.generate_ids``: ``output_logits=True``, log-probs after the turn."""
    import torch

    width = max(len(p) for p in prompts)
    ids = torch.tensor(prompts)
    with torch.no_grad():
        out = policy.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=True,
                                    max_new_tokens=sampling.max_new_tokens, temperature=1.0, top_k=0, top_p=1.0,
                                    eos_token_id=list(policy.stop_token_ids), pad_token_id=policy.pad_token_id,
                                    return_dict_in_generate=True, output_logits=True)
        new = out.sequences[:, width:]
        steps = [torch.log_softmax(logits.float(), -1).gather(1, new[:, i:i + 1]).squeeze(1)
                 for i, logits in enumerate(out.logits)]
        torch.stack(steps, 1)
    return int(new.numel())


def run(args: argparse.Namespace) -> int:
    if args.mode:
        print(json.dumps(_measure(args.mode, args.vocab, args.batch, args.new_tokens)))
        return 0
    rows = []
    for mode in MODES:
        cmd = [sys.executable, "-m", "training.bench.generate_memory", "--mode", mode, "--vocab", str(args.vocab),
               "--batch", str(args.batch), "--new-tokens", str(args.new_tokens)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            print(f"{mode}: failed ({done.returncode}): {done.stderr.strip().splitlines()[-1:]}")
            return 1
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    buffer_mb = args.batch * args.new_tokens * args.vocab * 4 / 2**20
    print(f"one turn: vocab {args.vocab}, batch {args.batch}, {args.new_tokens} new tokens, CPU "
          f"(a full float32 logits buffer is {buffer_mb:,.0f} MiB)")
    print(f"{'way':<34}{'peak RSS MiB':>14}{'growth MiB':>12}{'tokens':>9}")
    names = {"logits": "generate(output_logits=True)", "steps": "step-by-step logprobs (now)"}
    for row in rows:
        print(f"{names[row['mode']]:<34}{row['peak_rss_mb']:>14,.0f}{row['growth_mb']:>12,.0f}{row['tokens']:>9}")
    old, new = rows
    print(f"growth ratio: {old['growth_mb'] / max(new['growth_mb'], 1.0):.1f}x")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.bench.generate_memory",
                                     description=(__doc__ or "").strip(),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
