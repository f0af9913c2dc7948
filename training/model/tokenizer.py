"""Train the embedded byte-level BPE tokenizer locally (no hub access).

Besides the BPE merges, the vocabulary holds whole *JSON tokens* found in the training texts: a
JSON key with its colon and bracket (``"controls":[``, ``"budget_ok":``), a boolean value with its comma
(``true,``: a flag's value is a token of its own, predicted after its key, so a seat that copies a check
finds it by the key that the check states once), a quoted identifier value with its
leading comma when it has one (``"propose_protocol"``, ``,"hela_cells"``), a field name the prose renders
with an equals sign (``technique=``: in a Scientist's view it appears only where the Lab Manager
suggests moving the plan to another technique, so one token marks that decision), every snake_case
identifier (``co2_incubator``), and the integers ``0 .. number_tokens - 1``.  They are added tokens, matched
before pre-tokenization (leftmost-longest), so an action like ``{"sample_size":48,"controls":[...]``
is a short sequence of tokens that each occur once in the brief -- copying the published protocol
becomes one-token induction (find the current token in the prompt, emit its successor), which a
tiny model learns quickly.  The BPE merges are trained on the texts with those spans removed.

The pipeline matches what transformers 5 rebuilds as ``Qwen2Tokenizer`` when a qwen2 ``config.json``
sits beside the tokenizer (NFC normalizer, the Qwen2 split regex, then byte-level without its own regex,
byte-level decoder), so token ids are identical before and after ``save_pretrained`` + reload.
``build_tokenizer`` checks that on a probe text and raises if they differ.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Iterable, Sequence

from tokenizers import (
    Regex,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    trainers,
)
from transformers import AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast
from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

from training.config.model import (
    IM_END_TOKEN,
    IM_START_TOKEN,
    PAD_TOKEN,
    SPECIAL_TOKENS,
)

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


#: A boolean value after its key, with its trailing comma: ``true,`` (the key is a token of its own).
_BOOL = r'(?<=:)(?:true|false),?'
#: A JSON key with its colon (and bracket): ``"controls":[``.
_KEY = r'"[a-z0-9]+(?:_[a-z0-9]+)*":\[?'
#: A JSON string value, with the comma that separates it from the previous list item if any.
_VALUE = r',?"[a-z0-9]+(?:_[a-z0-9]+)*"(?!:)'
#: A field name as the prose renders a plan or a suggestion: ``technique=``, ``sample_size=``.
_ASSIGN = r'(?<![A-Za-z0-9_])[a-z0-9]+(?:_[a-z0-9]+)*='
#: A bare snake_case identifier with at least one underscore (item names in prose).
_IDENT = r'(?<![A-Za-z0-9_])[a-z0-9]+(?:_[a-z0-9]+)+(?![A-Za-z0-9_])'
JSON_TOKEN_PATTERN = re.compile("|".join((_KEY, _BOOL, _VALUE, _ASSIGN, _IDENT)))


def json_tokens(texts: Sequence[str], min_frequency: int) -> list[str]:
    """Every ``JSON_TOKEN_PATTERN`` match that occurs at least ``min_frequency`` times, sorted.

    Keys carry no leading comma, so a key is the same token whether it opens an object or follows
    another field; a value that would shadow a key (``,"x"`` before ``"x":``) is left out.
    """
    counts = Counter(m for text in texts for m in JSON_TOKEN_PATTERN.findall(text))
    frequent = {t for t, n in counts.items() if n >= min_frequency}
    keys = {t.split(":")[0] for t in frequent if t.endswith((":", ":["))}
    return sorted(t for t in frequent if t.lstrip(",") not in keys)


def train_tokenizer(
    texts: Iterable[str], *, vocab_size: int, min_frequency: int = 2, json_token_min_frequency: int = 0,
    number_tokens: int = 0,
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE on ``texts`` and wrap it with the chat template and special tokens.

    ``vocab_size`` bounds the BPE part.  ``json_token_min_frequency > 0`` adds the JSON tokens that
    occur that often (see the module docstring) and ``number_tokens`` the integers below it, as
    added (non-special) tokens after the BPE vocabulary.
    Special token ids: ``<|endoftext|>`` = 0 (pad), ``<|im_start|>`` = 1, ``<|im_end|>`` = 2 (eos).
    """
    texts = list(texts)
    added = json_tokens(texts, json_token_min_frequency) if json_token_min_frequency else []
    corpus = [JSON_TOKEN_PATTERN.sub(" ", t) for t in texts] if added else texts
    tok, trainer = _backend(vocab_size, min_frequency)
    tok.train_from_iterator(corpus, trainer=trainer)
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
    numbers = [str(i) for i in range(number_tokens)]
    if added or numbers:
        wrapped.add_tokens(added + [n for n in numbers if n not in wrapped.get_vocab()])
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
