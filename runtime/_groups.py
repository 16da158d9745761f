"""Turn the exception groups that nurseries raise into the plain documented error."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["plain_errors"]


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            out.extend(_leaves(exc))
        else:
            out.append(exc)
    return out


@contextmanager
def plain_errors() -> Iterator[None]:
    """Re-raise a group holding exactly one exception as that exception itself.

    Public calls document plain errors (``SessionOwnedError``, ``KeyError``...); the
    nursery inside ``open_runtime`` wraps whatever the body raised in a group. A group of
    several real errors stays a group: hiding any of them would lose information.
    """
    try:
        yield
    except BaseExceptionGroup as group:
        leaves = _leaves(group)
        if len(leaves) == 1:
            raise leaves[0] from leaves[0].__cause__
        raise
