"""Load-time validation of every model seat (train policy, eval agents, play, frozen opponents).

``validate_model(name, chat_template=...)`` checks, before anything runs, that a model can be played: the
name resolves to a local directory (``training.model.snapshot.local_model_dir``: the rules of
``training.model.model_path.check_model_path``, the default model built on first use, a hub id downloaded once or
read from the cache), the tokenizer loads, and a chat template exists (the
tokenizer's own, else the given one) and renders an append-only chat.  Any failure is a one-line
``UserInputError``.

The chat template option (``chat_template`` in train and eval configs, ``--chat-template`` for ``play``) is a
Jinja file path or a built-in name (``chatml``); it is used only for a model whose tokenizer has no template (a
base model), in memory, never written into the user's files.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Optional

from replicalab.seats import MODEL_PREFIX
from training.errors import UserInputError
from training.model.snapshot import local_model_dir

logger = logging.getLogger(__name__)

#: ChatML (``<|im_start|>role\ncontent<|im_end|>\n``), for base models without a template.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
#: Built-in chat templates by name (the chat template option's non-file values).
BUILTIN_TEMPLATES: dict[str, str] = {"chatml": CHATML_TEMPLATE}
#: How a user gives a chat template, in each entry point's spelling.
CHAT_TEMPLATE_OPTION = "chat_template (train and eval configs) or --chat-template (play)"
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
    """The Jinja text of a chat template option (None: none given)."""
    if option is None:
        return None
    if option in BUILTIN_TEMPLATES:
        return BUILTIN_TEMPLATES[option]
    path = Path(option).expanduser()
    if not path.is_file():
        raise UserInputError(f"chat template {option!r} is neither a file nor a built-in "
                             f"({', '.join(BUILTIN_TEMPLATES)})")
    return path.read_text()


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
                                     f"the text of its first {k} messages); give another with {CHAT_TEMPLATE_OPTION}")
    except UserInputError:
        raise
    except Exception as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UserInputError(f"the chat template cannot render a system/user/assistant chat: {first}") from None


def validate_model(name: str, *, chat_template: Optional[str] = None) -> str:
    """Check ``name`` (a local directory, a hub id or ``default``) can be played; return the local directory it
    loads from (``training.model.snapshot.local_model_dir``: the default model built, a hub id downloaded or
    found in the cache).

    ``chat_template`` is the resolved Jinja text of the chat template option, used when the tokenizer has none.
    """
    where = local_model_dir(name)
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(where)
    except Exception as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UserInputError(f"model {name!r}: the tokenizer does not load: {first}") from None
    template = tokenizer.chat_template or chat_template
    if not template:
        raise UserInputError(f"model {name!r} has no chat template (a base model?): set {CHAT_TEMPLATE_OPTION} "
                             f"to a Jinja file or a built-in ({', '.join(BUILTIN_TEMPLATES)})")
    try:
        check_append_only(tokenizer, template)
    except UserInputError as err:
        raise UserInputError(f"model {name!r}: {err}") from None
    return where


def validate_seats(specs: list[str], *, chat_template: Optional[str] = None) -> None:
    """Validate every ``model:DIR`` seat spec of ``specs`` (other specs are left to seat parsing)."""
    for spec in dict.fromkeys(specs):
        if spec.startswith(MODEL_PREFIX):
            validate_model(spec[len(MODEL_PREFIX):], chat_template=chat_template)
