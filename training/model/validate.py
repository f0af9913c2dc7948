"""Load-time validation of every model seat (train policy, eval agents, play, frozen opponents).

``validate_model(name, chat_template=...)`` checks, before anything runs, that a model can be played:
the name is an existing local directory or a Hugging Face hub id (with ``HF_HUB_OFFLINE=1`` a hub id must
already be in the local cache, and a name that looks like a path but does not exist is an error, never a
hub lookup); the directory holds a config, weights and a tokenizer; the tokenizer loads; a chat template
exists (the tokenizer's own, else the ``chat_template`` option) and renders an append-only chat.  Any
failure is a one-line ``UserInputError``.

The ``chat_template`` option (train and eval configs) is a Jinja file path or a built-in name (``chatml``);
it is used only for a model whose tokenizer has no template (a base model), in memory, never written into
the user's files.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any, Optional

from training.errors import UserInputError

logger = logging.getLogger(__name__)

#: ChatML (``<|im_start|>role\ncontent<|im_end|>\n``), for base models without a template.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
#: Built-in chat templates by name (the ``chat_template`` option's non-file values).
BUILTIN_TEMPLATES: dict[str, str] = {"chatml": CHATML_TEMPLATE}
#: A hub id: ``name`` or ``owner/name`` (letters, digits, ``-_.``).
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)?$")
WEIGHT_PATTERNS = ("*.safetensors", "*.safetensors.index.json", "pytorch_model*.bin", "*.bin.index.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
#: The probe chat of the append-only check: system, then alternating user/assistant turns.
PROBE_CHAT = [
    {"role": "system", "content": "You are a probe."},
    {"role": "user", "content": "First question?"},
    {"role": "assistant", "content": "First answer."},
    {"role": "user", "content": "Second question?"},
    {"role": "assistant", "content": "Second answer."},
    {"role": "user", "content": "Third question?"},
]


def resolve_chat_template(option: Optional[str]) -> Optional[str]:
    """The Jinja text of a ``chat_template`` option (None: none given)."""
    if option is None:
        return None
    if option in BUILTIN_TEMPLATES:
        return BUILTIN_TEMPLATES[option]
    path = Path(option).expanduser()
    if not path.is_file():
        raise UserInputError(f"chat_template {option!r} is neither a file nor a built-in "
                             f"({', '.join(BUILTIN_TEMPLATES)})")
    return path.read_text()


def looks_local(name: str) -> bool:
    """A name that can only mean a path (absolute, relative with ./ or ../, ~, or more than one slash)."""
    return (name.startswith(("/", "./", "../", "~", ".\\")) or name in (".", "..")
            or name.count("/") > 1 or "\\" in name or not HUB_ID.match(name))


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _check_files(path: Path) -> None:
    if not path.is_dir():
        raise UserInputError(f"model {str(path)!r} is not a directory")
    if not (path / "config.json").is_file():
        raise UserInputError(f"model {str(path)!r} has no config.json: not a Hugging Face model directory")
    if not any(next(path.glob(p), None) for p in WEIGHT_PATTERNS):
        raise UserInputError(f"model {str(path)!r} has no weights (*.safetensors or pytorch_model*.bin)")
    if not any((path / f).is_file() for f in TOKENIZER_FILES):
        raise UserInputError(f"model {str(path)!r} has no tokenizer ({' or '.join(TOKENIZER_FILES)})")


def _hub_snapshot(name: str) -> str:
    """A hub id's local snapshot when offline (must be cached); the id itself when online."""
    if not _offline():
        return name
    from huggingface_hub import snapshot_download

    try:
        return snapshot_download(name, local_files_only=True)
    except Exception:
        raise UserInputError(f"model {name!r} is not a local directory and not in the Hugging Face cache "
                             "(HF_HUB_OFFLINE=1 forbids downloading it)") from None


def check_append_only(tokenizer: Any, template: Optional[str] = None) -> None:
    """Raise ``UserInputError`` unless each prefix of ``PROBE_CHAT`` renders as a prefix of the next one
    (with the generation prompt after a user turn, as rollouts render it)."""
    def render(messages: list, prompt: bool) -> str:
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=prompt,
                                             chat_template=template)

    try:
        for k in range(2, len(PROBE_CHAT)):
            shorter, longer = PROBE_CHAT[:k], PROBE_CHAT[: k + 1]
            prompt = shorter[-1]["role"] == "user"
            if not render(longer, False).startswith(render(shorter, prompt)):
                raise UserInputError("the chat template is not append-only (rendering a longer chat changes "
                                     f"the text of its first {k} messages); give another with chat_template")
    except UserInputError:
        raise
    except Exception as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UserInputError(f"the chat template cannot render a system/user/assistant chat: {first}") from None


def validate_model(name: str, *, chat_template: Optional[str] = None) -> str:
    """Check ``name`` (a local directory, a hub id or ``default``) can be played; return where it loads from.

    ``chat_template`` is the resolved Jinja text of the config option, used when the tokenizer has none.
    """
    from training.model.default import DEFAULT_MODEL, resolve_model

    if name != DEFAULT_MODEL and not Path(name).expanduser().exists():
        if looks_local(name):
            raise UserInputError(f"model directory {name!r} does not exist")
        where = _hub_snapshot(name)
    else:
        where = resolve_model(name)
    if Path(where).exists():
        _check_files(Path(where))
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(where)
    except Exception as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UserInputError(f"model {name!r}: the tokenizer does not load: {first}") from None
    template = tokenizer.chat_template or chat_template
    if not template:
        raise UserInputError(f"model {name!r} has no chat template (a base model?): set chat_template to a "
                             f"Jinja file or a built-in ({', '.join(BUILTIN_TEMPLATES)})")
    try:
        check_append_only(tokenizer, template)
    except UserInputError as err:
        raise UserInputError(f"model {name!r}: {err}") from None
    return where


def validate_seats(specs: list[str], *, chat_template: Optional[str] = None) -> None:
    """Validate every ``model:DIR`` seat spec of ``specs`` (other specs are left to seat parsing)."""
    prefix = "model:"
    for spec in dict.fromkeys(specs):
        if spec.startswith(prefix):
            validate_model(spec[len(prefix):], chat_template=chat_template)
