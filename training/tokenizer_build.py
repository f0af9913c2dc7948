"""Train the embedded byte-level BPE tokenizer locally (no hub access).

The pipeline matches what transformers 5 rebuilds as ``Qwen2Tokenizer`` when a qwen2 ``config.json``
sits beside the tokenizer (NFC normalizer, the Qwen2 split regex, then byte-level without its own regex,
byte-level decoder), so token ids are identical before and after ``save_pretrained`` + reload.
``build_tokenizer`` checks that on a probe text and raises if they differ.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Sequence

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast
from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

from training.model_config import IM_END_TOKEN, IM_START_TOKEN, PAD_TOKEN, SPECIAL_TOKENS

#: Qwen-like chat template: ``<|im_start|>role\ncontent<|im_end|>`` with a newline between turns.
#: The prompt rendered with ``add_generation_prompt`` is a token prefix of prompt + completion, so
#: TRL's completion-only loss starts exactly at the assistant content.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' }}"
    "{%- if not loop.last or add_generation_prompt -%}{{ '\\n' }}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)

#: The tokenizer class transformers reloads the tokenizer as (matches the qwen2 model config).
TOKENIZER_CLASS = "Qwen2Tokenizer"
_PROBE_TEXT = (
    'Café naïve {"action_type": "propose_protocol", "sample_size": 12, "controls": ["vehicle"]}\n'
    "  Budget: $1,250.50 — 3 staff; it's 14 days.\r\n\t<tab> ÅΩ 你好"
)


def _backend(vocab_size: int, min_frequency: int) -> tuple[Tokenizer, trainers.BpeTrainer]:
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    return tok, trainer


def train_tokenizer(
    texts: Iterable[str], *, vocab_size: int, min_frequency: int = 2
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE on ``texts`` and wrap it with the chat template and special tokens.

    Special token ids: ``<|endoftext|>`` = 0 (pad), ``<|im_start|>`` = 1, ``<|im_end|>`` = 2 (eos).
    """
    tok, trainer = _backend(vocab_size, min_frequency)
    tok.train_from_iterator(texts, trainer=trainer)
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END_TOKEN,
        pad_token=PAD_TOKEN,
        unk_token=None,
        bos_token=None,
        additional_special_tokens=[IM_START_TOKEN],
        padding_side="left",
        clean_up_tokenization_spaces=False,
        model_max_length=1_000_000,
    )
    wrapped.chat_template = CHAT_TEMPLATE
    return wrapped


def save_and_verify(
    tokenizer: PreTrainedTokenizerBase, out_dir: Path, probes: Sequence[str] = ()
) -> PreTrainedTokenizerBase:
    """Save ``tokenizer`` to ``out_dir``, reload it with ``AutoTokenizer`` and assert ids are unchanged.

    Call after the model's ``config.json`` is in ``out_dir`` so the reload takes the same path as users'.
    Returns the reloaded tokenizer.
    """
    tokenizer.save_pretrained(str(out_dir))
    _set_tokenizer_class(out_dir)
    reloaded = AutoTokenizer.from_pretrained(str(out_dir))
    chat = [{"role": "system", "content": _PROBE_TEXT}, {"role": "user", "content": "hi"}]
    for text in (_PROBE_TEXT, *probes):
        before, after = tokenizer.encode(text), reloaded.encode(text)
        if before != after:
            raise AssertionError(f"tokenizer ids changed after reload for {text[:60]!r}: {before[:20]} vs {after[:20]}")
    kwargs = dict(add_generation_prompt=True, tokenize=True, return_dict=False)
    if tokenizer.apply_chat_template(chat, **kwargs) != reloaded.apply_chat_template(chat, **kwargs):
        raise AssertionError("chat-templated ids changed after reload")
    for attr in ("pad_token_id", "eos_token_id"):
        if getattr(tokenizer, attr) != getattr(reloaded, attr):
            raise AssertionError(f"{attr} changed after reload")
    return reloaded


def _set_tokenizer_class(out_dir: Path) -> None:
    """Record ``Qwen2Tokenizer`` as the class, the one transformers picks anyway beside a qwen2 config."""
    import json

    path = out_dir / "tokenizer_config.json"
    cfg = json.loads(path.read_text())
    cfg["tokenizer_class"] = TOKENIZER_CLASS
    path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")
