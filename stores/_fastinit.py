"""Positional constructors for the frozen values made on every append.

An ``@attrs.frozen`` class's ``__init__`` must step around its own ``__setattr__``
(which refuses every assignment): it sets each field through ``object.__setattr__``,
looked up by name. For the values the per-event path makes -- a :class:`PreparedEvent`
per event, an :class:`AppendOp` per batch op -- that is about a quarter of the
instructions of making them. :func:`positional_constructor` makes a function that takes
every field positionally and stores it through the slot's own descriptor: the same
value (equal, same hash and repr, as frozen), made for less. It is for the hot paths
inside tidelog, which pass well-typed fields; users construct the classes as usual.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar

import attrs

__all__ = ["positional_constructor"]

T = TypeVar("T")


def positional_constructor(cls: type[T]) -> Callable[..., T]:
    """A function ``make(field1, field2, ...)`` that returns ``cls(field1, field2, ...)``
    without the frozen ``__init__``'s cost: every field positional, in declaration order.

    Raises ``TypeError`` (at import, where it is called) for a class it would construct
    differently from ``cls`` itself: not a slotted frozen attrs class, or one with
    validators, converters, non-init fields, a post-init hook or a cached hash."""
    if not (attrs.has(cls) and "__slots__" in cls.__dict__):
        raise TypeError(f"{cls.__name__} is not a slotted attrs class")
    fields = attrs.fields(cls)
    if (
        hasattr(cls, "__attrs_post_init__")
        or hasattr(cls, "__attrs_pre_init__")
        or "_attrs_cached_hash" in cls.__slots__  # type: ignore[attr-defined]
        or any(f.validator is not None or f.converter is not None or not f.init for f in fields)
    ):
        raise TypeError(f"{cls.__name__}'s __init__ does more than store its fields")
    names = [f.name for f in fields]
    scope: dict[str, Any] = {"_new": object.__new__, "_cls": cls}
    body = []
    for i, name in enumerate(names):
        scope[f"_set{i}"] = inspect.getattr_static(cls, name).__set__  # the slot's descriptor
        body.append(f"    _set{i}(obj, {name})\n")
    source = (
        f"def make_{cls.__name__}({', '.join(names)}):\n"
        "    obj = _new(_cls)\n" + "".join(body) + "    return obj\n"
    )
    exec(source, scope)  # as attrs makes its own methods
    make: Callable[..., T] = scope[f"make_{cls.__name__}"]
    make.__doc__ = f"``{cls.__name__}({', '.join(names)})``, made without the frozen __init__."
    return make
