"""Every field of a config, described: what ``replicalab <command> --help-config`` prints.

``config_fields(cls)`` walks a config model depth-first: one ``ConfigField`` per leaf field (dotted key,
type, default, description), grouped by section (a nested config model).  A model that appears only
inside a field's type (``SweepConfig.search`` values can be a ``Range``) is listed as a section of
that field, keyed ``field.<KEY>``.  Defaults of a section come from its parent's default (the rollout's
``sampling`` default differs from ``SamplingConfig()``).  Torch-free.
"""

from __future__ import annotations

import enum
import textwrap
import types
import typing
from dataclasses import dataclass
from typing import Any, Iterator, Optional

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

#: Printed as the default of a field without one.
REQUIRED = "(required)"
#: Width of the wrapped descriptions.
WIDTH = 100


@dataclass(frozen=True)
class ConfigField:
    """One field: ``key`` dotted from the config's top level, ``section`` the dotted key of its model."""

    key: str
    section: str
    type: str
    default: str
    description: str


@dataclass(frozen=True)
class ConfigSection:
    """A nested config model: its dotted key ("" at the top level), description, and leaf fields."""

    key: str
    description: str
    fields: tuple[ConfigField, ...]


def type_name(annotation: Any) -> str:
    """A short, readable spelling of a field's type: ``int | None``, ``'ray' | 'inprocess'``, ``list[str]``."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join("None" if a is type(None) else type_name(a) for a in args)
    if origin is not None:
        inner = ", ".join("..." if a is Ellipsis else type_name(a) for a in args)
        return f"{getattr(origin, '__name__', str(origin))}[{inner}]"
    if annotation is Any:
        return "any"
    return getattr(annotation, "__name__", str(annotation))


def show(value: Any) -> str:
    """A default as a user writes it in YAML or a ``KEY=VALUE`` override."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return show(value.value)
    if isinstance(value, str):
        return value if value else '""'
    if isinstance(value, BaseModel):
        return show(value.model_dump(mode="json"))
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(show(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {show(v)}" for k, v in value.items()) + "}"
    return repr(value)


def _models_in(annotation: Any) -> Iterator[type[BaseModel]]:
    """Config models named inside ``annotation`` (dict values, list items, union members)."""
    for arg in typing.get_args(annotation):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            yield arg
        else:
            yield from _models_in(arg)


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def config_sections(cls: type[BaseModel], *, key: str = "", description: str = "",
                    instance: Optional[BaseModel] = None) -> list[ConfigSection]:
    """``cls``'s sections, the top level first, each followed by its own sub-sections."""
    instance = instance if instance is not None else cls.model_construct()  # defaults, not validated
    leaves: list[ConfigField] = []
    below: list[ConfigSection] = []
    for name, info in cls.model_fields.items():
        dotted = f"{key}.{name}" if key else name
        text = info.description or ""
        if _is_model(info.annotation):
            below += config_sections(info.annotation, key=dotted, description=text,
                                     instance=getattr(instance, name, None))
            continue
        value = getattr(instance, name, PydanticUndefined)
        default = REQUIRED if value is PydanticUndefined else show(value)
        leaves.append(ConfigField(dotted, key, type_name(info.annotation), default, text))
        for model in _models_in(info.annotation):
            below += config_sections(model, key=f"{dotted}.<KEY>", description=(
                f"{model.__name__}: a value of {dotted}. {(model.__doc__ or '').strip()}").strip())
    return [ConfigSection(key, description or (cls.__doc__ or "").strip().split("\n\n")[0], tuple(leaves)), *below]


def config_fields(cls: type[BaseModel]) -> list[ConfigField]:
    """Every leaf field of ``cls`` and of its sections, in the order ``--help-config`` prints them."""
    return [f for section in config_sections(cls) for f in section.fields]


def format_config_help(cls: type[BaseModel], command: str) -> str:
    """The text of ``replicalab <command> --help-config``: every field, grouped by section."""
    lines = textwrap.wrap(f"{cls.__name__}: the config of replicalab {command}. Set a field in the YAML "
                          "given to --config (nested by section) or as a KEY=VALUE override with its dotted key.",
                          WIDTH) + [""]
    indent = " " * 6
    for section in config_sections(cls):
        if not section.fields:
            continue
        title = section.key or "top level"
        lines += textwrap.wrap(f"[{title}] {_plain(section.description)}", WIDTH, subsequent_indent="  ")
        for f in section.fields:
            lines.append(f"  {f.key}: {f.type} = {f.default}")
            lines += textwrap.wrap(_plain(f.description), WIDTH, initial_indent=indent, subsequent_indent=indent,
                                   break_on_hyphens=False)
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _plain(text: str) -> str:
    """``text`` on one line, without reStructuredText's double backquotes."""
    return " ".join(text.replace("``", "").split())
