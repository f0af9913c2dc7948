"""The default model's fingerprint: a sha256 over what decides what ``build_default_model`` builds.

A committed build is valid while its fingerprint (``build_info.json``'s ``fingerprint``) equals the one
the code computes now.  The hash covers, as canonical JSON:

- ``RECIPE_VERSION``, the version of the build code (copy circuit, tokenizer training, SFT): bump it when
  a change to that code changes the model it builds;
- the recipe's config (``DefaultModelConfig``, less ``NOT_IN_FINGERPRINT``: settings of speed and logging);
- the prompt format: the chat template and special tokens of the embedded tokenizer;
- SFT transcripts: both seats' chats of the first ``FINGERPRINT_SEEDS`` training seeds' episodes, recorded
  exactly as the build records them (same Scientist draws, every template x difficulty), so any change
  to the game, the scripted agents or the prompts (``replicalab.prompts``, ``replicalab.parsing``) that
  shows in those episodes changes it.  They are the first episodes of the build's own transcripts
  (the build plays ``n_train_seeds`` seeds); a change that only shows on later seeds goes unseen.

Computing it plays about a hundred scripted episodes: well under a second on a 2-core machine.
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from typing import Any, Optional

from training.config.model import SPECIAL_TOKENS, DefaultModelConfig

#: Version of the build code; bump when a change to it changes the model it builds.
RECIPE_VERSION = 6
#: Training seeds whose scripted episodes (x every template x difficulty) the fingerprint hashes.
FINGERPRINT_SEEDS = 12
#: Config fields (dotted) that do not change what is built: threads and logging.
NOT_IN_FINGERPRINT = ("torch_threads", "sft.logging_steps")


def recipe_config(cfg: DefaultModelConfig) -> dict[str, Any]:
    """The config as JSON, less the fields of ``NOT_IN_FINGERPRINT``."""
    data = cfg.model_dump(mode="json")
    for dotted in NOT_IN_FINGERPRINT:
        *parents, leaf = dotted.split(".")
        node = data
        for key in parents:
            node = node[key]
        node.pop(leaf)
    return data


@lru_cache(maxsize=4)
def _transcripts(n_seeds: int, skill_rate: float, lab_thrifty_rate: float, max_rounds: int,
                 shuffle_seed: int) -> dict[str, list]:
    """Both seats' transcripts of the first ``n_seeds`` training seeds (cached: never modify them)."""
    from training.model.sft_data import collect_transcripts

    scientist, lab_manager, _ = collect_transcripts(n_seeds, skill_rate=skill_rate, lab_thrifty_rate=lab_thrifty_rate,
                                                    max_rounds=max_rounds,
                                                    shuffle_seed=shuffle_seed)
    return {"scientist": scientist, "lab_manager": lab_manager}


def _canonical(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def fingerprint_inputs(cfg: DefaultModelConfig) -> dict[str, Any]:
    """Everything the fingerprint hashes (see the module docstring)."""
    from training.model.tokenizer import CHAT_TEMPLATE

    transcripts = _transcripts(min(FINGERPRINT_SEEDS, cfg.n_train_seeds), cfg.skill_rate, cfg.lab_thrifty_rate,
                               cfg.max_rounds, cfg.sft.seed)
    return {
        "recipe_version": RECIPE_VERSION,
        "config": recipe_config(cfg),
        "chat_template": CHAT_TEMPLATE,
        "special_tokens": list(SPECIAL_TOKENS),
        "transcripts": transcripts,
    }


def model_fingerprint(cfg: Optional[DefaultModelConfig] = None) -> str:
    """sha256 (hex) of ``fingerprint_inputs(cfg)`` as canonical JSON; ``cfg`` defaults to the shipped recipe."""
    text = _canonical(fingerprint_inputs(cfg or DefaultModelConfig()))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
