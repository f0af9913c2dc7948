"""What ``final/`` holds: the trained weights (merged when LoRA trained) and the user's tokenizer, unchanged.

TRL saves the trainer's tokenizer object, which it may have changed (a pad token set to eos when the
tokenizer has none).  ``save_user_tokenizer`` replaces those files by the user's own, byte for byte; the
only change it ever makes is a chat template supplied by the ``chat_template`` option (a base model), and
that is stated in the log and in ``final/README.md``.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any, Optional

logger = logging.getLogger(__name__)

#: Files a tokenizer may be saved as (every one the trainer wrote is replaced by the user's).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "chat_template.jinja", "chat_template.json", "vocab.json", "merges.txt", "tokenizer.model")
README = "README.md"
#: Where the LoRA adapter goes inside ``final/``.
ADAPTER_DIRNAME = "adapter"


def tokenizer_changes(original: Any, trained: Any) -> list[str]:
    """How the trainer's tokenizer differs from the user's (what checkpoints carry), as sentences."""
    changes = []
    if original.pad_token != trained.pad_token:
        changes.append(f"pad token set to {trained.pad_token!r} (the user's tokenizer has "
                       f"{original.pad_token!r}) in the trainer's copy, saved into checkpoints")
    return changes


def save_user_tokenizer(source: str, final: Path, *, chat_template: Optional[str] = None,
                        notes: tuple[str, ...] = ()) -> list[str]:
    """Put the user's tokenizer into ``final`` (replacing what the trainer saved) and return the changes made.

    ``source`` is the model directory or hub id training started from; ``chat_template`` is the configured
    template, written only when the user's tokenizer has none.  ``notes`` (e.g. ``tokenizer_changes``)
    are stated in ``final/README.md`` with the changes."""
    from transformers import AutoTokenizer

    for name in TOKENIZER_FILES:
        (final / name).unlink(missing_ok=True)
    original = AutoTokenizer.from_pretrained(source)
    src = Path(source)
    if src.is_dir():
        for name in TOKENIZER_FILES:
            if (src / name).is_file():
                shutil.copy2(src / name, final / name)
    else:
        original.save_pretrained(str(final))
    changes = []
    if chat_template and not original.chat_template:
        (final / "chat_template.jinja").write_text(chat_template, encoding="utf-8")
        changes.append("chat_template.jinja added from the chat_template option (the model had no template)")
    stated = [*changes, *notes]
    for line in stated:
        logger.warning("tokenizer of %s: %s", final, line)
    lines = ["# Trained model", "", f"Trained from `{source}` by `replicalab train`.", "",
             "## Tokenizer", ""]
    lines += [f"- {c}" for c in stated] or ["- The tokenizer files are the user's own, unchanged."]
    (final / README).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return changes


def _tied_as_one(state: dict[str, Any], model: Any) -> dict[str, Any]:
    """``state`` with every name of one tied parameter (input and output embeddings) holding the same tensor: the
    gathered copies are separate, and ``save_pretrained`` drops a tied duplicate only when it shares storage."""
    first: dict[int, str] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        if id(param) in first and name in state and first[id(param)] in state:
            state[name] = state[first[id(param)]]
        first.setdefault(id(param), name)
    return state


def save_final(trainer: Any, source: str, final: Path, *, chat_template: Optional[str] = None) -> None:
    """``final/``: the trained weights as a full model (LoRA merged, the adapter under ``final/adapter``)
    and the user's tokenizer (``save_user_tokenizer``).  Every learner process calls it; the main one
    writes."""
    from transformers import AutoTokenizer

    model, main = trainer.model, trainer.accelerator.is_main_process
    if hasattr(model, "merge_and_unload"):  # a PEFT model: training is over, merge in place
        if main:
            model.save_pretrained(str(final / ADAPTER_DIRNAME))
            model.merge_and_unload().save_pretrained(str(final))
            logger.info("final/: LoRA adapter merged into the base weights (adapter kept in %s)", ADAPTER_DIRNAME)
    elif getattr(trainer, "is_fsdp_enabled", False):
        # FSDP: every process takes part in gathering the whole weights (a sharded checkpoint format leaves
        # Trainer.save_model a no-op); the main one writes them as a plain model
        state = trainer.accelerator.get_state_dict(trainer.model)
        if main:
            model = trainer.accelerator.unwrap_model(trainer.model)
            model.save_pretrained(str(final), state_dict=_tied_as_one(state, model))
    else:  # every learner process (the gather is collective under ZeRO-3); the main one writes
        trainer.save_model(str(final))
    if not main:
        return
    notes = tuple(tokenizer_changes(AutoTokenizer.from_pretrained(source), trainer.processing_class))
    save_user_tokenizer(source, final, chat_template=chat_template, notes=notes)
