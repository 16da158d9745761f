"""Classes without a public constructor (trio's ``NoPublicConstructor`` way).

The runtime's handles (``SessionWriter``, ``Snapshot``, ``Tail``...) and the ``Runtime``
itself only make sense wired to a running engine, so they are created by the runtime
alone: calling the class raises :class:`TypeError`; the module that defines a class makes
its instances with ``cls._create(...)`` (and offers a function for the other modules).
"""

from __future__ import annotations

from abc import ABCMeta
from typing import Any, TypeVar

__all__ = ["NoPublicConstructor"]

T = TypeVar("T")


class NoPublicConstructor(ABCMeta):
    """Metaclass of a class that is only created by its own package (use with
    ``@typing.final``): ``Cls(...)`` raises :class:`TypeError`, ``Cls._create(...)``
    builds an instance."""

    def __call__(cls, *_args: object, **_kwargs: object) -> Any:
        raise TypeError(
            f"{cls.__module__}.{cls.__qualname__} has no public constructor: "
            "the runtime creates it (see open_runtime)"
        )

    def _create(cls: type[T], *args: object, **kwargs: object) -> T:
        return super().__call__(*args, **kwargs)  # type: ignore[misc, no-any-return]
