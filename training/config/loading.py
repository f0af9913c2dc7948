"""Config loading: pydantic defaults, deep-merged with a YAML mapping, then ``a.b.c=value`` overrides.

Every entry point's config (``TrainConfig``, ``EvalConfig``, ``SweepConfig``, ``DefaultModelConfig``) is
loaded here: an unknown key anywhere fails with the valid keys of its level; ``save_resolved`` writes the
resolved config next to a run, and loading that file back gives an equal config.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Optional, Sequence, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from training.errors import UserInputError

#: ``model_config`` of every config model: unknown keys fail, a loaded config is immutable.
STRICT = ConfigDict(extra="forbid", frozen=True)
#: ``STRICT`` that also reads a number given for a string field as its text (``run_name: 2026``).
STRICT_NUMBERS_AS_STR = ConfigDict(STRICT, coerce_numbers_to_str=True)
#: File name of the resolved config inside a run directory.
RESOLVED_CONFIG_NAME = "config.yaml"
ConfigT = TypeVar("ConfigT", bound=BaseModel)


class ConfigError(UserInputError, ValueError):
    """A config file or override that cannot be applied (unknown key, malformed override, not a mapping)."""


def _merge(base: dict[str, Any], update: dict[str, Any], where: str, source: str,
           defaults: Optional[dict[str, Any]]) -> None:
    """Deep-merge ``update`` into ``base`` in place.  ``defaults`` is the level's default dump: a nested config
    section merges key by key (an unknown key fails); a free-form mapping (its default is empty, e.g.
    ``seats.pools``) takes any key, and a value given for it whole replaces it."""
    for key, value in update.items():
        _set(base, key, value, where, source, defaults)


def _set(base: dict[str, Any], key: str, value: Any, where: str, source: str,
         defaults: Optional[dict[str, Any]]) -> None:
    _check_key(base, key, where, source, defaults)
    path = f"{where}.{key}" if where else str(key)
    section = defaults.get(key) if defaults is not None else None
    if isinstance(section, dict) and section and isinstance(value, dict) and isinstance(base[key], dict):
        _merge(base[key], value, path, source, section)  # a nested config section (its dump is never empty)
    else:
        base[key] = value


def _override(data: dict[str, Any], defaults: dict[str, Any], text: str) -> None:
    """Apply one ``a.b.c=value`` override: walk the dotted key (each level must know the key, unless it is a
    free-form mapping), then set the last key as ``_set`` does: a section merges, anything else is replaced."""
    parts, value = _parse_override(text)
    source = f"override {text!r}"
    base, level, where = data, defaults, ""
    for part in parts[:-1]:
        _check_key(base, part, where, source, level)
        if not isinstance(base.get(part), dict):
            base[part] = {}  # a key inside a free-form mapping, or a value the validation then refuses
        section = level.get(part) if level is not None else None
        level = section if isinstance(section, dict) and section else None
        base, where = base[part], f"{where}.{part}" if where else part
    _set(base, parts[-1], value, where, source, level)


def _check_key(base: dict[str, Any], key: str, where: str, source: str, defaults: Optional[dict[str, Any]]) -> None:
    if defaults is not None and key not in base:
        level = f"under '{where}'" if where else "at the top level"
        path = f"{where}.{key}" if where else str(key)
        raise ConfigError(f"unknown key '{path}' in {source}; valid keys {level}: {', '.join(base)}")


def _parse_override(text: str) -> tuple[list[str], Any]:
    key, sep, raw = text.partition("=")
    parts = key.strip().split(".")
    if not sep or not all(p.strip() for p in parts):
        raise ConfigError(f"malformed override {text!r}: expected KEY=VALUE with a dotted key, e.g. grpo.beta=0.04")
    try:
        value: Any = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise ConfigError(f"override of '{key.strip()}': its value {raw!r} is not valid YAML ({problem}); write "
                          "a number, a word, a list [a, b] or a quoted string, e.g. 'data.templates=[cell_biology]'"
                          ) from None
    return [p.strip() for p in parts], value


def load_config(cls: type[ConfigT], path: str | Path | None, overrides: Sequence[str] = ()) -> ConfigT:
    """Defaults of ``cls``, deep-merged with the YAML mapping at ``path`` (None or an empty file: no
    change), then with each ``a.b.c=value`` override (value parsed as YAML), validated."""
    defaults = cls.model_construct().model_dump(mode="python")  # not yet validated
    data = copy.deepcopy(defaults)
    if path is not None:
        loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{path}: a config file must hold a mapping of keys, got {type(loaded).__name__}")
        _merge(data, loaded or {}, "", str(path), defaults)
    for text in overrides:
        _override(data, defaults, text)
    return cls.model_validate(data)


def one_line(exc: ValidationError) -> str:
    """A pydantic ``ValidationError`` as one line: ``LOC: MESSAGE (got VALUE)`` per error, joined by ``; ``
    (scalar inputs only are shown)."""
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err.get("loc", ())) or "config"
        got = err.get("input")
        shown = "" if isinstance(got, (dict, list)) or got is None else f" (got {got!r})"
        parts.append(f"{where}: {err.get('msg', 'invalid').removeprefix('Value error, ')}{shown}")
    return "; ".join(parts)


def save_resolved(cfg: BaseModel, run_dir: str | Path) -> Path:
    """Write ``cfg`` to ``<run_dir>/config.yaml`` (every field, defaults included) and return the path."""
    out = Path(run_dir) / RESOLVED_CONFIG_NAME
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False), encoding="utf-8")
    return out
