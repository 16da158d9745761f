"""Drafts: how the frozen values made per event are built for less.

An ``@attrs.frozen`` class refuses every assignment (its ``__setattr__`` raises), so its
generated ``__init__`` steps around that: it stores each field through
``object.__setattr__``, looked up by name -- about 850 instructions a field. The values
every append makes (a :class:`~stores.NewEvent` and a :class:`~stores.PreparedEvent` per
event, an :class:`~stores.AppendOp` per batch op) and every read makes (a
:class:`~stores.StoredEvent` per event) are :func:`drafted` instead: their class makes
each instance in a generated ``__new__``, as an instance of the class's *draft* -- a
plain class with the same slots -- whose fields are stored by plain assignment (a slot
store, a few dozen instructions), and which then becomes the frozen class by having its
``__class__`` set, as CPython allows between classes of one layout. The result is the
very value attrs' ``__init__`` makes -- equal, same hash and repr, frozen, copied and
pickled alike (``__getnewargs__``) -- for about half the instructions on six fields.

A drafted class has no ``__weakref__`` slot (attrs' ``weakref_slot=False``: the draft
cannot have one where attrs puts it, so the layouts would differ) and cannot be
subclassed (a subclass's instances could not be made from the draft): a subclass is
refused with a ``TypeError`` where it is defined.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import attrs

__all__ = ["draft_of", "drafted"]

T = TypeVar("T")

#: Each drafted class's draft, for code that builds its instances inline
#: (:func:`draft_of`).
_DRAFTS: dict[type, type] = {}


def drafted(cls: type[T]) -> type[T]:
    """Class decorator, on top of ``@attrs.frozen(weakref_slot=False)``: make the
    class's instances from a draft (see the module doc). attrs' generated ``__init__``
    gives way to a ``__new__`` of the same signature (type checkers still read attrs'
    ``__init__``).

    Raises ``TypeError`` (at import, where it is applied) for a class that cannot be
    made this way: not a slotted attrs class with attrs' ``__init__``, one whose fields
    have validators, converters or factories, one with a hook or a cached hash, or one
    whose layout CPython will not swap for its draft's (a ``__weakref__`` slot)."""
    made = cls  # (attrs.has narrows cls below)
    slots = cls.__dict__.get("__slots__")
    code = getattr(cls.__dict__.get("__init__"), "__code__", None)
    if (
        not attrs.has(cls)
        or slots is None
        or code is None
        or not code.co_filename.startswith("<attrs generated")
    ):
        raise TypeError(f"{cls.__name__} is not a slotted attrs class with attrs' __init__")
    fields = attrs.fields(cls)
    if (
        hasattr(cls, "__attrs_post_init__")
        or hasattr(cls, "__attrs_pre_init__")
        or "_attrs_cached_hash" in slots
        or any(f.validator is not None or f.converter is not None or not f.init for f in fields)
        or any(isinstance(f.default, attrs.Factory) for f in fields)  # type: ignore[arg-type]
    ):
        raise TypeError(f"{cls.__name__}'s construction must do more than store its fields")
    draft = type(f"{cls.__name__}Draft", (), {"__slots__": slots, "__module__": cls.__module__})
    probe: Any = object.__new__(draft)
    probe.__class__ = cls  # TypeError if CPython refuses: the layouts differ
    delattr(cls, "__init__")  # (object's, which takes the arguments __new__ took)
    type.__setattr__(cls, "__new__", staticmethod(_new_function(cls, draft, fields)))
    positional = tuple(f.name for f in fields if not f.kw_only)
    type.__setattr__(cls, "__getnewargs__", _getnewargs(positional))
    type.__setattr__(cls, "__init_subclass__", classmethod(_refuse_subclass))
    _DRAFTS[cls] = draft
    return made


def draft_of(cls: type) -> type:
    """The draft of a :func:`drafted` class: an instance of it, its fields stored and
    its ``__class__`` set to ``cls``, is a ``cls`` (what the generated ``__new__`` does,
    for code that does it inline). Raises ``KeyError`` for a class not drafted."""
    return _DRAFTS[cls]


def _new_function(
    cls: type, draft: type, fields: tuple[attrs.Attribute[Any], ...]
) -> Callable[..., Any]:
    """The ``__new__`` of ``cls``: attrs' ``__init__`` signature (the fields' aliases,
    defaults and keyword-only marks), its body the draft's assignments."""
    namespace: dict[str, Any] = {"_new": object.__new__, "_draft": draft}
    params = ["cls"]
    # attrs' order: the positional fields, then the keyword-only ones
    for field in sorted(fields, key=lambda f: f.kw_only):
        alias = field.alias or field.name
        if field.kw_only and "*" not in params:
            params.append("*")
        if field.default is attrs.NOTHING:
            params.append(alias)
        else:
            namespace[f"_default_{alias}"] = field.default
            params.append(f"{alias}=_default_{alias}")
    lines = [f"def __new__({', '.join(params)}):", "    made = _new(_draft)"]
    lines += [f"    made.{field.name} = {field.alias or field.name}" for field in fields]
    lines += ["    made.__class__ = cls", "    return made"]
    code = compile("\n".join(lines) + "\n", f"<tidelog drafted {cls.__qualname__}>", "exec")
    exec(code, namespace)
    function: Callable[..., Any] = namespace["__new__"]
    function.__qualname__ = f"{cls.__qualname__}.__new__"
    return function


def _getnewargs(names: tuple[str, ...]) -> Callable[[object], tuple[object, ...]]:
    """The ``__getnewargs__`` that copies and pickles use: the positional fields (pickle's
    state, attrs' ``__setstate__``, sets the others)."""

    def __getnewargs__(self: object) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in names)

    return __getnewargs__


def _refuse_subclass(cls: type) -> NoReturn:
    """A drafted class's ``__init_subclass__``."""
    base = next(b for b in cls.__mro__[1:] if b in _DRAFTS)
    raise TypeError(
        f"{base.__name__} is a final value class and cannot be subclassed "
        f"({cls.__name__}): wrap it, or keep what you add beside it"
    )
