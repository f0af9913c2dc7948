"""Every model name of a run resolved to a local directory before anything starts.

A model name is a local directory, ``default`` (the embedded model, built on first use) or a Hugging Face id.
``local_model_dir(name)`` turns one into the directory it loads from: a local directory as it is, the default
model's directory, or the hub id's snapshot in the local Hugging Face cache.  A hub id is downloaded once, by the
driver, with ``huggingface_hub.snapshot_download`` (the hub's ``HF_ENDPOINT`` and cache, ``HF_HOME`` /
``HF_HUB_CACHE``); with ``HF_HUB_OFFLINE=1`` only the cache is read.  Either failure is a one-line
``UserInputError`` naming the model.

``local_model_dirs(names)`` resolves several names, each once.  The training driver resolves the policy model and
every ``model:`` seat this way and hands the directories on: TRL loads the policy (and the reference model) from
its directory, and the rollout workers, which run with ``HF_HUB_OFFLINE=1`` (``training.rollout.worker``), load
the policy and the frozen opponents from theirs (``RolloutSpec.model_dirs``): no worker ever reaches the hub.
On a cluster of several nodes the directories must be on a file system every node sees (a shared
``HF_HUB_CACHE``).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Iterable

from replicalab.seats import DEFAULT_MODEL, MODEL_PREFIX
from training.errors import UserInputError
from training.model.default import resolve_default_model
from training.model.model_path import check_files, check_model_path, looks_local

logger = logging.getLogger(__name__)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def download_snapshot(name: str) -> str:
    """The local snapshot directory of hub id ``name``: from the cache when offline, else downloaded (files already
    cached are not fetched again).  One-line ``UserInputError`` when neither works."""
    from huggingface_hub import is_offline_mode, snapshot_download

    if is_offline_mode():  # HF_HUB_OFFLINE as huggingface_hub read it: the cache or the one-line refusal
        return check_model_path(name)
    logger.info("model %s: fetching its snapshot from the Hugging Face hub (files already cached are kept)", name)
    try:
        return snapshot_download(name)
    except Exception as exc:
        raise UserInputError(f"model {name!r} could not be downloaded from the Hugging Face hub "
                             f"({type(exc).__name__}: {_first_line(exc)}); check the id, the network, HF_TOKEN "
                             "for a gated model, or give a local directory") from None


def local_model_dir(name: str) -> str:
    """The local directory model ``name`` (a local directory, ``default`` or a hub id) loads from; the default model
    is built there first when it is not yet, a hub id downloaded (``download_snapshot``)."""
    if name == DEFAULT_MODEL:
        return check_model_path(str(resolve_default_model()))
    local = Path(name).expanduser()
    if local.exists() or looks_local(name):
        return check_model_path(name)
    snapshot = download_snapshot(name)
    check_files(name, Path(snapshot))
    return snapshot


def local_model_dirs(names: Iterable[str]) -> dict[str, str]:
    """``local_model_dir`` of every name, each resolved once (name -> local directory, in first-seen order)."""
    return {name: local_model_dir(name) for name in dict.fromkeys(names)}


def seat_models(specs: Iterable[str]) -> list[str]:
    """The model names of the ``model:NAME`` seat specs among ``specs`` (each once, in order)."""
    return list(dict.fromkeys(s[len(MODEL_PREFIX):] for s in specs if s.startswith(MODEL_PREFIX)))
