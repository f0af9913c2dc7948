"""The rules for any model name, cheap enough to run before anything starts (no build, no tokenizer load).

``check_model_path(name)`` is the one set of rules for any model name (a ``model`` config value, the DIR of a
``model:DIR`` seat): ``default`` is the embedded model (``training.model.default``); a name that exists or looks
like a path must be a directory holding ``config.json``, weights and a tokenizer (a missing path is an error,
never a hub lookup); anything else is a Hugging Face id, which with ``HF_HUB_OFFLINE`` set must already be in the
local cache (its snapshot is checked like a directory).  ``check_seat_models`` applies it to seat specs;
``training.model.snapshot`` and ``training.model.validate`` build on it.  ``resolve_model(name)`` says where a
model loads from (the default built on first use).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from replicalab.seats import DEFAULT_MODEL, MODEL_PREFIX
from training.errors import UserInputError
from training.model.default import default_model_dir, resolve_default_model


def resolve_model(name: str) -> str:
    """Where to load a model from: ``default`` is the embedded default (built on first use), an existing
    local path is expanded, anything else is passed on as a Hugging Face id."""
    if name == DEFAULT_MODEL:
        return str(resolve_default_model())
    local = Path(name).expanduser()
    return str(local) if local.exists() else name


#: A hub id: ``name`` or ``owner/name`` (letters, digits, ``-_.``).
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)?$")
#: Files of which a model directory must hold at least one to have weights, and to have a tokenizer.
WEIGHT_PATTERNS = ("*.safetensors", "*.safetensors.index.json", "pytorch_model*.bin", "*.bin.index.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
#: What a model name may be (the tail of every path error).
VALID_MODEL = f"expected a model directory (config.json, weights, tokenizer), a Hugging Face id or '{DEFAULT_MODEL}'"


def looks_local(name: str) -> bool:
    """A name that can only mean a path (absolute, relative with ./ or ../, ~, or more than one slash)."""
    return (name.startswith(("/", "./", "../", "~", ".\\")) or name in (".", "..")
            or name.count("/") > 1 or "\\" in name or not HUB_ID.match(name))


def offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` forbids the hub."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def check_files(name: str, path: Path) -> None:
    """``path`` (where model ``name`` loads from) is a directory with a config, weights and a tokenizer."""
    if not path.exists():
        raise UserInputError(f"model path {name} does not exist; {VALID_MODEL}")
    if not path.is_dir():
        raise UserInputError(f"model path {name} is a file, not a directory; {VALID_MODEL}")
    if not (path / "config.json").is_file():
        raise UserInputError(f"model path {name} has no config.json (not a Hugging Face model directory); "
                             f"{VALID_MODEL}")
    if not any(next(path.glob(p), None) for p in WEIGHT_PATTERNS):
        raise UserInputError(f"model path {name} has no weights (none of {', '.join(WEIGHT_PATTERNS)}); "
                             f"{VALID_MODEL}")
    if not any((path / f).is_file() for f in TOKENIZER_FILES):
        raise UserInputError(f"model path {name} has no tokenizer (none of {', '.join(TOKENIZER_FILES)}); "
                             f"{VALID_MODEL}")


def check_model_path(name: str) -> str:
    """Check model ``name`` (a ``model`` config value or the DIR of ``model:DIR``) before anything is started
    or written, and return where it loads from: the default model's directory (not built here), the local
    directory, the cached snapshot of a hub id when offline, else the hub id."""
    if name == DEFAULT_MODEL:
        return str(default_model_dir())
    local = Path(name).expanduser()
    if local.exists() or looks_local(name):
        check_files(name, local)
        return str(local)
    if not offline():
        return name
    from huggingface_hub import snapshot_download

    try:
        snapshot = snapshot_download(name, local_files_only=True)
    except Exception:
        raise UserInputError(f"model {name!r} is not a local directory and not in the Hugging Face cache "
                             f"(HF_HUB_OFFLINE is set); {VALID_MODEL}") from None
    check_files(name, Path(snapshot))
    return snapshot


def check_seat_models(*specs: str) -> None:
    """``check_model_path`` for each ``model:DIR`` seat spec among ``specs`` (other seats pass)."""
    for spec in dict.fromkeys(specs):
        if spec.startswith(MODEL_PREFIX):
            check_model_path(spec[len(MODEL_PREFIX):])
