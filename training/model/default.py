"""The embedded default model: a tiny Qwen2-style LM and BPE tokenizer built locally, SFT-warm-started.

``build_default_model(out_dir)`` (a) records transcripts of the scripted agents on training seeds,
(b) trains a byte-level BPE tokenizer on them, (c) builds a Qwen2 model from ``DefaultModelConfig``,
(d) warm-starts it with TRL's ``SFTTrainer`` and (e) writes a standard Hugging Face checkpoint
directory (config, weights, tokenizer, generation config, ``README.md`` model card, and
``build_info.json``, with the fingerprint of what built it).  ``resolve_default_model()`` finds it: the
committed build under ``artifacts/default-model`` while its fingerprint is the code's, else it rebuilds
(saying so first).

The rules for any model name (``check_model_path``) are ``training.model.model_path``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from itertools import cycle, islice
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence

from training.config.model import (
    DEFAULT_MODEL_DIRNAME,
    DEFAULT_MODEL_ENV,
    REPO_ROOT,
    DefaultModelConfig,
)
from training.errors import UserInputError
from training.model.card import BUILD_INFO_FILE, model_card

if TYPE_CHECKING:  # torch and transformers load only when a model is built (the model-path checks stay cheap)
    from transformers import PreTrainedTokenizerBase, Qwen2ForCausalLM

logger = logging.getLogger(__name__)
#: Completion tokens the context must hold beyond the longest training prompt.
MIN_COMPLETION_ROOM = 64


def default_model_dir() -> Path:
    """``$REPLICALAB_DEFAULT_MODEL`` if set, else ``<repo>/artifacts/default-model``."""
    env = os.environ.get(DEFAULT_MODEL_ENV)
    return Path(env).expanduser() if env else REPO_ROOT / "artifacts" / DEFAULT_MODEL_DIRNAME


#: CPU seconds of a build of the shipped recipe (2,427 s with 2 torch threads, 2026-12-07), for the time a build takes
#: when no earlier build's ``build_info.json`` says.
BUILD_CPU_SECONDS = 2430.0


def build_minutes(info: Optional[dict[str, Any]] = None, cfg: Optional[DefaultModelConfig] = None) -> float:
    """About how many minutes a build takes on this machine: an earlier build's CPU seconds (else
    ``BUILD_CPU_SECONDS``) over the torch threads the build can use here (more when the machine is busy)."""
    cpu = float((info or {}).get("cpu_seconds") or BUILD_CPU_SECONDS)
    threads = max(1, min((cfg or DefaultModelConfig()).torch_threads, os.cpu_count() or 1))
    return max(1.0, cpu / threads / 60.0)


def read_build_info(model_dir: Path) -> Optional[dict[str, Any]]:
    """The directory's ``build_info.json``, or None when it has none (not a default-model build)."""
    path = model_dir / BUILD_INFO_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def stale_dir(target: Path, fingerprint: Optional[str]) -> Path:
    """A new sibling of ``target`` to keep a stale build in: ``<name>.stale-<fingerprint[:12]>[-k]``."""
    base = target.with_name(f"{target.name}.stale-{(fingerprint or 'unknown')[:12]}")
    aside, k = base, 1
    while aside.exists():
        aside, k = base.with_name(f"{base.name}-{k}"), k + 1
    return aside


def resolve_default_model(path: Optional[Path | str] = None, *, progress: bool = True,
                          cfg: Optional[DefaultModelConfig] = None) -> Path:
    """The default model's directory (``default_model_dir()`` unless ``path``), ready to load.

    A default-model build (it has ``build_info.json``) is used when its fingerprint
    (``training.model.fingerprint``) is the code's.  Otherwise one warning line says so and how long the
    build takes, the stale build is renamed aside (``stale_dir``: nothing is deleted; it is moved back if
    the build fails) and the recipe (``cfg``, default: the one the build records, else the shipped one) is built in
    its place.  An empty or missing directory is
    built (saying so first); a model directory without ``build_info.json`` (a model put there by hand)
    is used as it is.
    """
    from training.model.fingerprint import model_fingerprint

    target = Path(path).expanduser() if path is not None else default_model_dir()
    if not (target / "config.json").exists():
        logger.warning("no default model in %s yet: building it, about %.0f minutes on this machine",
                       target, build_minutes(cfg=cfg))
        build_default_model(target, cfg, progress=progress)
        return target
    info = read_build_info(target)
    if info is None:
        return target
    if cfg is None:  # the recipe the build records: stale means the code would now build it differently
        cfg = recorded_config(info)
    expected, built = model_fingerprint(cfg), info.get("fingerprint")
    if built == expected:
        return target
    aside = stale_dir(target, built)
    which = ("the committed default model" if target.resolve() == (REPO_ROOT / "artifacts" / DEFAULT_MODEL_DIRNAME)
             else f"the default model in {target}")
    logger.warning("%s is stale (built for fingerprint %s, the code is %s): rebuilding it, about %.0f minutes on "
                   "this machine; the stale build moves to %s", which, (built or "none")[:12], expected[:12],
                   build_minutes(info, cfg), aside)
    try:
        target.rename(aside)
    except OSError as exc:
        raise UserInputError(f"{which} is stale and cannot be moved aside ({exc}); build one with "
                             f"`replicalab build-default-model --out DIR` and set {DEFAULT_MODEL_ENV}=DIR") from None
    try:
        build_default_model(target, cfg, progress=progress)
    except BaseException:
        if not target.exists():
            aside.rename(target)
        raise
    return target


def recorded_config(info: dict) -> Optional[DefaultModelConfig]:
    """The recipe a build's ``build_info.json`` records (None when it records none this code can read)."""
    from pydantic import ValidationError

    try:
        return DefaultModelConfig.model_validate(info["config"])
    except (KeyError, TypeError, ValidationError):
        return None


def check_build_target(out: Path) -> None:
    """Refuse to build into ``out`` when it is a file, or a non-empty directory that is not a previous
    default-model build (no ``build_info.json``): the build replaces ``out`` and must never delete
    files it did not write."""
    if out.is_file() or (out.exists() and not out.is_dir()):
        raise UserInputError(f"--out {out} is a file; give a new directory or a previous default-model build")
    if out.is_dir() and any(out.iterdir()) and not (out / BUILD_INFO_FILE).is_file():
        raise UserInputError(f"--out {out} is a non-empty directory that is not a default-model build "
                             f"(no {BUILD_INFO_FILE}); refusing to replace it: give a new or empty directory")


def make_model(cfg: DefaultModelConfig, vocab_size: int, pad_id: int, eos_id: int) -> "Qwen2ForCausalLM":
    """A freshly initialised Qwen2 causal LM with the configured architecture."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    arch = cfg.architecture
    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=arch.hidden_size,
        intermediate_size=arch.intermediate_size,
        num_hidden_layers=arch.num_hidden_layers,
        num_attention_heads=arch.num_attention_heads,
        num_key_value_heads=arch.num_key_value_heads,
        head_dim=arch.head_dim or arch.hidden_size // arch.num_attention_heads,
        max_position_embeddings=arch.max_position_embeddings,
        rope_theta=arch.rope_theta,
        tie_word_embeddings=arch.tie_word_embeddings,
        bos_token_id=None,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
    )
    torch.manual_seed(cfg.sft.seed)
    model = Qwen2ForCausalLM(config)
    if arch.copy_circuit:
        from training.model.copy_circuit import wire_copy_circuit

        wire_copy_circuit(model, seed=cfg.sft.seed, copy_scale=arch.copy_scale, recency_score=arch.copy_recency,
                          self_match_score=arch.copy_self_match)
    model.generation_config = GenerationConfig(
        eos_token_id=[eos_id], pad_token_id=pad_id, bos_token_id=None, do_sample=False,
        max_new_tokens=cfg.max_new_tokens,
    )
    return model


def build_default_model(out_dir: Path | str, cfg: Optional[DefaultModelConfig] = None, *,
                        progress: bool = True) -> Path:
    """Build the default model into ``out_dir`` (replacing it) and return the directory.

    The build writes into a sibling scratch directory and renames it at the end, so an interrupted
    build never leaves a half-written checkpoint behind.
    """
    import torch

    from training.model.fingerprint import RECIPE_VERSION, model_fingerprint
    from training.model.sft import run_sft, tokenize_example
    from training.model.sft_data import (  # needs the game package
        collect_transcripts,
        example_texts,
    )
    from training.model.tokenizer import save_and_verify, train_tokenizer

    cfg = cfg or DefaultModelConfig()
    out = Path(out_dir).expanduser().resolve()
    check_build_target(out)
    started, cpu_started = time.perf_counter(), time.process_time()
    fingerprint = model_fingerprint(cfg)
    torch.set_num_threads(cfg.torch_threads)
    _say(progress, f"recording scripted transcripts on {cfg.n_train_seeds} train seeds")
    sci, lab, stats = collect_transcripts(cfg.n_train_seeds, skill_rate=cfg.skill_rate,
                                          lab_thrifty_rate=cfg.lab_thrifty_rate, max_rounds=cfg.max_rounds,
                                          shuffle_seed=cfg.sft.seed, progress=progress)
    labelled = training_examples(sci, lab, cfg.scientist_first_turn_repeats, cfg.scientist_decision_turn_repeats)
    examples = [ex for _, ex in labelled]
    _say(progress, f"{stats.examples_scientist} scientist + {stats.examples_lab_manager} "
                   f"lab-manager turns from {stats.episodes} episodes as {len(examples)} chat examples; "
                   "training tokenizer")
    tokenizer = train_tokenizer(example_texts(examples), vocab_size=cfg.vocab_size,
                                min_frequency=cfg.tokenizer_min_frequency,
                                json_token_min_frequency=cfg.json_token_min_frequency,
                                number_tokens=cfg.number_tokens)
    rows = [tokenize_example(tokenizer, ex) for ex in examples]
    lengths = [len(r["input_ids"]) for r in rows]
    max_len = max(lengths)
    positions = cfg.architecture.max_position_embeddings
    if max_len + MIN_COMPLETION_ROOM > positions:
        raise ValueError(f"longest example has {max_len} tokens; max_position_embeddings={positions} is too small")
    model = make_model(cfg, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id)
    n_params = sum(p.numel() for p in model.parameters())
    _say(progress, f"{n_params / 1e6:.2f}M parameters, vocab {len(tokenizer)}, "
                   f"longest example {max_len} tokens (mean {sum(lengths) / len(lengths):.0f}, "
                   f"{sum(lengths)} in all); SFT")
    phases, losses = [], []
    if cfg.sft.lm_steps:
        roles = cfg.sft.lm_phase_roles
        losses.append(f"loss on all tokens of the {' and '.join(roles) or 'no'} chats, "
                      "on the assistant turns of the others")
        _say(progress, f"SFT phase 1: {cfg.sft.lm_steps} steps, {losses[0]}")
        lm_rows = [lm_phase_row(row, role in roles and "messages" in ex) for (role, ex), row in zip(labelled, rows)]
        phases.append(run_sft(model, tokenizer, lm_rows, cfg.sft, max_length=max_len,
                              max_steps=cfg.sft.lm_steps, completion_only=True, progress=progress))
    losses.append("loss on the assistant turns")
    _say(progress, f"SFT phase {len(phases) + 1}: {cfg.sft.completion_steps} steps, {losses[-1]}")
    phases.append(run_sft(model, tokenizer, rows, cfg.sft, max_length=max_len,
                          max_steps=cfg.sft.completion_steps, completion_only=True,
                          learning_rate=cfg.sft.completion_learning_rate, progress=progress))
    if cfg.sft.lab_manager_steps:
        copies = cfg.sft.lab_manager_flag_drill
        drill = flag_drill_rows(tokenizer, labelled) * copies if copies else []
        losses.append("loss on the assistant turns of every Lab Manager chat, "
                      + (f"on the flags alone of {copies} more copies of each, " if copies else "")
                      + "and as many Scientist rows")
        _say(progress, f"SFT phase {len(phases) + 1}: {cfg.sft.lab_manager_steps} steps, {losses[-1]}")
        phase_rows = lab_manager_phase_rows(labelled, rows, drill)
        phases.append(run_sft(model, tokenizer, phase_rows, cfg.sft, max_length=max_len,
                              max_steps=cfg.sft.lab_manager_steps, completion_only=True,
                              learning_rate=cfg.sft.completion_learning_rate, progress=progress))
    sft = phases[-1]
    scratch = out.with_name(f"{out.name}.building-{os.getpid()}")  # one per process: builds may race
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    model.save_pretrained(str(scratch))
    save_and_verify(tokenizer, scratch, probes=[m["content"] for m in examples[0]["messages"]])
    info: dict[str, Any] = {
        "fingerprint": fingerprint,
        "recipe_version": RECIPE_VERSION,
        "config": cfg.model_dump(mode="json"),
        "parameters": n_params,
        "vocab_size": len(tokenizer),
        "transcripts": {**stats.__dict__, "seeds": list(stats.seeds)},
        "examples": len(rows),
        "max_example_tokens": max_len,
        "mean_example_tokens": sum(lengths) / len(lengths),
        "sft": sft.__dict__,
        "sft_phases": [{**p.__dict__, "loss": loss} for p, loss in zip(phases, losses)],
        "cpu_seconds": time.process_time() - cpu_started,
        "build_seconds": time.perf_counter() - started,
        "torch": torch.__version__,
    }
    if cfg.architecture.copy_circuit:
        from training.model.copy_circuit import circuit_sizes

        info["copy_circuit"] = circuit_sizes(model.config)
    (scratch / BUILD_INFO_FILE).write_text(json.dumps(info, indent=2) + "\n")
    (scratch / "README.md").write_text(model_card(info))
    if out.exists():
        shutil.rmtree(out)
    scratch.rename(out)
    _say(progress, f"wrote {out} in {info['build_seconds']:.0f}s "
                   f"(SFT steps {[p.steps for p in phases]}, final-phase mean loss {sft.mean_loss:.3f})")
    return out


def training_examples(scientist: list, lab_manager: list, first_turn_repeats: int = 0,
                      decision_turn_repeats: int = 0) -> list[tuple[str, dict]]:
    """(role, example): one whole-chat example per recorded seat and episode (both seats interleaved),
    plus ``first_turn_repeats`` extra copies of every Scientist opening turn (the protocol proposal)
    and ``decision_turn_repeats`` of every Scientist turn at a skill's chance (``is_skill_chance``).
    A decision copy is a prompt/completion example (the chat so far, then the reply): its loss is on
    that reply alone, in both phases, so the copies train the decision rather than the opening again."""
    from training.model.sft_data import (
        conversation_example,
        is_skill_chance,
        turn_example,
    )

    out: list[tuple[str, dict]] = []
    for i in range(max(len(scientist), len(lab_manager))):
        out.extend((role, conversation_example(x[i]))
                   for role, x in (("scientist", scientist), ("lab_manager", lab_manager)) if i < len(x))
    for _ in range(first_turn_repeats):
        out.extend(("scientist", turn_example(t, 0)) for t in scientist)
    decisions = [t[k] for t in scientist for k in range(1, len(t)) if is_skill_chance(t[k])]
    for _ in range(decision_turn_repeats):
        out.extend(("scientist", ex) for ex in decisions)
    return out


def lab_manager_phase_rows(labelled: list[tuple[str, dict]], rows: list[dict],
                           drill: Sequence[dict] = ()) -> list[dict]:
    """The rows of the Lab Manager phase: every Lab Manager chat, the ``drill`` rows (``flag_drill_rows``), and
    as many Scientist rows as those two together, in the order of ``labelled`` (``training_examples``: the
    shuffled whole chats come first; from the start again when there are fewer), so the Scientist seat keeps
    half of the phase while the Lab Manager's replies are drilled."""
    lab = [row for (role, _), row in zip(labelled, rows) if role == "lab_manager"]
    scientist = [row for (role, _), row in zip(labelled, rows) if role == "scientist"]
    wanted = len(lab) + len(drill)
    return lab + list(drill) + (list(islice(cycle(scientist), wanted)) if scientist else [])


#: The Lab Manager's reply field that follows its checks (``replicalab.parsing.WRITTEN_FIRST``).
DECISION_FIELD = "action_type"


def flags_end(reply: str) -> Optional[int]:
    """Where a Lab Manager reply's checks end: the offset of its decision's key (None when it has none)."""
    end = reply.find(f'"{DECISION_FIELD}"')
    return end if end > 0 else None


def flag_drill_rows(tokenizer: "PreTrainedTokenizerBase", labelled: list[tuple[str, dict]]) -> list[dict]:
    """One row per Lab Manager chat of ``labelled`` with the loss on each reply's checks alone (``flags_end``):
    the flags and ``feasible``, each copied from the lab's check its prompt ends with."""
    from training.model.sft import prefix_loss_row

    return [prefix_loss_row(tokenizer, ex, flags_end) for role, ex in labelled if role == "lab_manager"]


def lm_phase_row(row: dict[str, list[int]], all_tokens: bool) -> dict[str, list[int]]:
    """A tokenized row for the language-model phase: the loss on every token, or (``all_tokens`` False)
    on its assistant turns only, as in the completion phase."""
    if not all_tokens:
        return row
    return {"input_ids": row["input_ids"], "completion_mask": [1] * len(row["input_ids"])}


def _say(progress: bool, text: str) -> None:
    if progress:
        logger.info(text)


