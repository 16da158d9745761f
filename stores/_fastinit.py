"""Slot setters for the hand-written ``__init__`` of the frozen values made per event.

An ``@attrs.frozen`` class's generated ``__init__`` must step around its own
``__setattr__`` (which refuses every assignment): it sets each field through
``object.__setattr__``, looked up by name. For the values every append makes -- a
:class:`~stores.NewEvent` and a :class:`~stores.PreparedEvent` per event, an
:class:`~stores.AppendOp` per batch op -- and every read makes -- a
:class:`~stores.StoredEvent` per event -- that is about a quarter of the instructions
of making them. Those classes bring their own ``__init__`` (attrs' ``init=False``) that
stores each field through its slot's own descriptor, got from :func:`slot_setters`: the
same value (equal, same hash and repr, frozen), made for less.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import attrs

__all__ = ["slot_setters"]


def slot_setters(cls: type) -> tuple[Callable[[Any, Any], None], ...]:
    """The functions ``set(obj, value)`` that store each field of ``cls`` in its slot,
    in declaration order, for the class's own ``__init__``.

    Raises ``TypeError`` (at import, where it is called) for a class whose ``__init__``
    must do more than store its fields, or cannot take them this way: not a slotted
    attrs class with an ``__init__`` of its own, or one with validators, converters, a
    post-init hook or a cached hash."""
    init = cls.__dict__.get("__init__")
    code = getattr(init, "__code__", None)
    if not (attrs.has(cls) and "__slots__" in cls.__dict__) or (
        code is None or code.co_filename.startswith("<attrs generated")
    ):
        raise TypeError(f"{cls.__name__} is not a slotted attrs class with its own __init__")
    fields = attrs.fields(cls)
    if (
        hasattr(cls, "__attrs_post_init__")
        or hasattr(cls, "__attrs_pre_init__")
        or "_attrs_cached_hash" in cls.__dict__["__slots__"]
        or any(f.validator is not None or f.converter is not None for f in fields)
    ):
        raise TypeError(f"{cls.__name__}'s __init__ must do more than store its fields")
    return tuple(inspect.getattr_static(cls, f.name).__set__ for f in fields)
