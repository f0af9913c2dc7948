"""Locally built stand-ins for users' own Hugging Face models (random weights, tokenizers trained here, the
real chat templates and generation settings of the families they imitate).

- ``llama``: Llama architecture (rotary), a Llama-3-Instruct-style template (``<|eot_id|>`` closes a turn,
  a "Cutting Knowledge Date" system header), NO pad token; the tokenizer's eos is ``<|end_of_text|>``.
- ``qwen``: Qwen2 architecture, the Qwen2.5-Instruct ChatML template that injects a default system message
  when the chat has none, and Qwen2.5's generation_config (repetition_penalty 1.05, top_k 20, ...).
- ``gpt2``: GPT-2 (absolute position embeddings), NO chat template (a base model: the ``chat_template``
  option gives it one); ``<|im_start|>``/``<|im_end|>`` exist as added tokens.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

#: Context window of every stand-in (game prompts run to ~1.5k tokens with these tiny tokenizers).
CONTEXT = 4096
KINDS = ("llama", "qwen", "gpt2")

LLAMA3_TEMPLATE = (
    "{{- bos_token }}"
    "{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content']|trim %}"
    "{%- set messages = messages[1:] %}{%- else %}{%- set system_message = '' %}{%- endif %}"
    "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}"
    "{{- 'Cutting Knowledge Date: December 2023\\nToday Date: 26 Jul 2024\\n\\n' }}"
    "{{- system_message }}{{- '<|eot_id|>' }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim"
    " + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)
QWEN25_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if (message.role == 'user') or (message.role == 'system' and not loop.first)"
    " or (message.role == 'assistant') %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
QWEN25_GENERATION = dict(do_sample=True, repetition_penalty=1.05, temperature=0.7, top_p=0.8, top_k=20)


def _texts() -> list[str]:
    from replicalab.prompts import system_prompt

    from tests.conftest import policy_synthetic_examples

    chats = [m["content"] for ex in policy_synthetic_examples() for m in (*ex["prompt"], *ex["completion"])]
    return chats + [system_prompt("scientist"), system_prompt("lab_manager")]


def _byte_bpe(specials: list[str], vocab_size: int = 600):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=1, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(_texts(), trainer=trainer)
    return tok


def _save_fast(tokenizer, out: Path) -> None:
    """Save as a plain ``PreTrainedTokenizerFast`` (Llama-3's class) and check ids survive a reload."""
    from transformers import AutoTokenizer

    tokenizer.save_pretrained(str(out))
    path = out / "tokenizer_config.json"
    cfg = json.loads(path.read_text())
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    path.write_text(json.dumps(cfg, indent=2))
    reloaded = AutoTokenizer.from_pretrained(str(out))
    for text in _texts()[:3]:
        assert tokenizer.encode(text) == reloaded.encode(text), "stand-in tokenizer ids changed on reload"


def build_llama(out: Path, **arch: int) -> Path:
    """``arch`` overrides the architecture (e.g. ``head_dim=64`` for vLLM's CPU attention)."""
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    tok = PreTrainedTokenizerFast(tokenizer_object=_byte_bpe(specials), bos_token="<|begin_of_text|>",
                                  eos_token="<|end_of_text|>", additional_special_tokens=specials[2:],
                                  clean_up_tokenization_spaces=True)
    tok.chat_template = LLAMA3_TEMPLATE
    ids = {s: tok.convert_tokens_to_ids(s) for s in specials}
    config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=CONTEXT,
                         bos_token_id=ids["<|begin_of_text|>"], eos_token_id=ids["<|end_of_text|>"],
                         tie_word_embeddings=False, **arch)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(
        bos_token_id=ids["<|begin_of_text|>"], eos_token_id=[ids["<|end_of_text|>"]],
        do_sample=True, temperature=0.6, top_p=0.9)
    model.save_pretrained(str(out))
    _save_fast(tok, out)
    return out


def build_qwen(out: Path) -> Path:
    from transformers import GenerationConfig

    from training.config.model import ArchitectureConfig, DefaultModelConfig
    from training.model.default import make_model
    from training.model.tokenizer import save_and_verify, train_tokenizer

    tok = train_tokenizer(_texts(), vocab_size=600, min_frequency=1)
    tok.chat_template = QWEN25_TEMPLATE
    arch = ArchitectureConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                              num_key_value_heads=2, max_position_embeddings=CONTEXT, copy_circuit=False,
                              rope_theta=10000.0)
    model = make_model(DefaultModelConfig(architecture=arch), len(tok), tok.pad_token_id, tok.eos_token_id)
    model.generation_config = GenerationConfig(
        bos_token_id=None, pad_token_id=tok.pad_token_id, eos_token_id=[tok.eos_token_id, tok.pad_token_id],
        **QWEN25_GENERATION)
    model.save_pretrained(str(out))
    save_and_verify(tok, out, probes=_texts()[:3])
    return out


def build_gpt2(out: Path) -> Path:
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = PreTrainedTokenizerFast(tokenizer_object=_byte_bpe(specials), bos_token="<|endoftext|>",
                                  eos_token="<|endoftext|>", unk_token="<|endoftext|>",
                                  additional_special_tokens=specials[1:])
    eos = tok.convert_tokens_to_ids("<|endoftext|>")
    config = GPT2Config(vocab_size=len(tok), n_positions=CONTEXT, n_embd=32, n_layer=2, n_head=2,
                        bos_token_id=eos, eos_token_id=eos)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config)
    model.save_pretrained(str(out))
    _save_fast(tok, out)
    assert has_no_template(out)
    return out


def has_no_template(out: Path) -> bool:
    from transformers import AutoTokenizer

    return not AutoTokenizer.from_pretrained(str(out)).chat_template


BUILDERS = {"llama": build_llama, "qwen": build_qwen, "gpt2": build_gpt2}
