"""Shared fixtures.  Keep additions namespaced (prefix by area) and cheap."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

#: Architecture of the synthetic test checkpoint (tiny: builds and trains in about a second).
POLICY_TINY_ARCH = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=2, max_position_embeddings=512, copy_circuit=False)


def policy_synthetic_examples(n: int = 24) -> list[dict]:
    """Chat prompt/completion examples shaped like the game's (JSON completions), no game needed."""
    examples = []
    for i in range(n):
        prompt = [
            {"role": "system", "content": "You are the Scientist. Reply with exactly one JSON object."},
            {"role": "user", "content": f"Paper: effect {i}. Method: use centrifuge and dmso; n={i + 3}."},
        ]
        completion = ('{"action_type":"propose_protocol","sample_size":%d,"technique":"assay",'
                      '"required_equipment":["centrifuge"],"rationale":"as in the paper"}' % (i + 3))
        examples.append({"prompt": prompt, "completion": [{"role": "assistant", "content": completion}]})
    return examples


@pytest.fixture(scope="session")
def policy_tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Qwen2 checkpoint + BPE tokenizer trained on synthetic chat text, with a few SFT steps.

    The directory also holds ``sft_changed.txt``: how many parameter tensors SFT changed / total.
    """
    import torch

    from training.config.model import (
        ArchitectureConfig,
        DefaultModelConfig,
        SFTHyperParams,
    )
    from training.model.default import make_model
    from training.model.sft import run_sft, sequence_lengths
    from training.model.tokenizer import save_and_verify, train_tokenizer

    out = tmp_path_factory.mktemp("policy-tiny-model")
    examples = policy_synthetic_examples()
    texts = [m["content"] for ex in examples for m in (*ex["prompt"], *ex["completion"])]
    tokenizer = train_tokenizer(texts, vocab_size=400, min_frequency=1)
    cfg = DefaultModelConfig(architecture=ArchitectureConfig(**POLICY_TINY_ARCH),
                             sft=SFTHyperParams(lm_steps=0, completion_steps=4, per_device_train_batch_size=4,
                                                logging_steps=1))
    model = make_model(cfg, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id)
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    run_sft(model, tokenizer, examples, cfg.sft, max_length=max(sequence_lengths(tokenizer, examples)),
            max_steps=cfg.sft.completion_steps, progress=False)
    changed = sum(not torch.equal(before[k], v) for k, v in model.state_dict().items())
    model.save_pretrained(str(out))
    save_and_verify(tokenizer, out, probes=texts[:4])
    (out / "sft_changed.txt").write_text(f"{changed}/{len(before)}\n")
    return out
