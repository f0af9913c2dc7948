"""``trusted``: a record built from values that are already valid, without validating them again.

The env builds its observations, turn records and logs from parts that were validated when they entered
(actions, protocols, scenario facts); re-validating them on every step was most of an episode's overhead.
``trusted(cls, **values)`` sets the same instance state validation would, and falls back to validation
whenever ``cls`` is not a plain record or ``values`` does not name every field in order.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, TypeVar

from pydantic import BaseModel

_Model = TypeVar("_Model", bound=BaseModel)
#: The setters of the four instance slots of every BaseModel: the state ``model_construct`` sets (``trusted``).
_SET_DICT, _SET_FIELDS_SET, _SET_EXTRA, _SET_PRIVATE = (
    BaseModel.__dict__[slot].__set__
    for slot in ("__dict__", "__pydantic_fields_set__", "__pydantic_extra__", "__pydantic_private__")
)


@lru_cache(maxsize=None)
def _plain_fields(cls: type[BaseModel]) -> tuple[tuple[str, ...], frozenset[str]] | None:
    """The field names of ``cls`` in declaration order (and as a set), or None when validation does more
    for it than fill its slots with the given values (a root model, a custom ``__new__``, a post-init hook,
    extra fields kept, an alias)."""
    fields = cls.__pydantic_fields__
    if (cls.__pydantic_root_model__ or cls.__new__ is not object.__new__ or cls.__pydantic_post_init__
            or cls.model_config.get("extra") == "allow"
            or any(f.alias is not None or f.validation_alias is not None for f in fields.values())):
        return None
    return tuple(fields), frozenset(fields)


def trusted(cls: type[_Model], **values: Any) -> _Model:
    """The record ``cls(**values)`` validates to, built without validation from values that are already valid
    (the env's own records, made of validated parts).

    When ``values`` names every field of ``cls`` in declaration order (the env's records do), the instance's
    slots are set directly -- the same ``__dict__``, fields set, extra and private state that validation (and
    ``model_construct``) gives; otherwise the values are validated.
    """
    plain = _plain_fields(cls)
    if plain is None or tuple(values) != plain[0]:
        return cls(**values)
    record = object.__new__(cls)
    _SET_DICT(record, values)
    _SET_FIELDS_SET(record, set(plain[1]))
    _SET_EXTRA(record, None)
    _SET_PRIVATE(record, None)
    return record
