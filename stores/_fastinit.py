"""Drafts: how the frozen values made per event are built for less.

An ``@attrs.frozen`` class refuses every assignment (its ``__setattr__`` raises), so its
generated ``__init__`` steps around that: it stores each field through
``object.__setattr__``, looked up by name -- about 850 instructions a field. The values
every append makes (a :class:`~stores.NewEvent` and a :class:`~stores.PreparedEvent` per
event, an :class:`~stores.AppendOp` per batch op) and every read makes (a
:class:`~stores.StoredEvent` per event) are built in their class's ``__new__`` instead
(attrs' ``init=False``): an instance of the class's *draft* -- a plain class with the
same slots, from :func:`draft_class` -- gets its fields by plain assignment (a slot store,
a few dozen instructions), then becomes the frozen class by having its ``__class__``
set, which CPython allows between classes of the same layout. The result is the very
value attrs' ``__init__`` makes: equal, same hash and repr, frozen, copied and pickled
alike (``__getnewargs__``), for about half the instructions on six fields.

Such a class has no ``__weakref__`` slot (attrs' ``weakref_slot=False``: a slot the draft
would lack, which makes the layouts differ) and cannot be subclassed
(:func:`refuse_subclass`: a subclass's instances could not be made from the draft).
"""

from __future__ import annotations

from typing import Any, NoReturn

import attrs

__all__ = ["draft_class", "refuse_subclass"]


def draft_class(cls: type) -> type:
    """The plain class with the slots of ``cls``, whose instances may become ``cls``
    instances by setting their ``__class__``: for the class's own ``__new__``.

    Raises ``TypeError`` (at import, where it is called) for a class that cannot be
    made this way: not a slotted attrs class with a ``__new__`` of its own and no
    ``__init__``, one with validators, converters, a hook or a cached hash, or one whose
    layout CPython will not swap for its draft's (a ``__weakref__`` slot, for one)."""
    slots = cls.__dict__.get("__slots__")
    if not attrs.has(cls) or slots is None or "__new__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__} is not a slotted attrs class with its own __new__")
    fields = attrs.fields(cls)
    if (
        "__init__" in cls.__dict__
        or hasattr(cls, "__attrs_post_init__")
        or hasattr(cls, "__attrs_pre_init__")
        or "_attrs_cached_hash" in slots
        or any(f.validator is not None or f.converter is not None for f in fields)
    ):
        raise TypeError(f"{cls.__name__}'s construction must do more than store its fields")
    draft = type(f"{cls.__name__}Draft", (), {"__slots__": slots, "__module__": cls.__module__})
    probe: Any = object.__new__(draft)
    probe.__class__ = cls  # TypeError if CPython refuses: the layouts differ
    return draft


def refuse_subclass(cls: type) -> NoReturn:
    """The ``__init_subclass__`` of a class built from a draft: its instances are made
    as the draft's, so a subclass's could not be. Raises ``TypeError`` at the subclass's
    definition."""
    base = next(b for b in cls.__mro__[1:] if "__new__" in b.__dict__)
    raise TypeError(
        f"{base.__name__} is a final value class and cannot be subclassed "
        f"({cls.__name__}): wrap it, or keep what you add beside it"
    )
