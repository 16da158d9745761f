"""The runtime's own options (``open_runtime``'s keywords other than the store's).

The store's options (``synchronous``, ``busy_timeout_ms``) are checked by the backend that
opens the store; these are checked here, before anything is opened or created.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import attrs

from stores import InvalidArgumentError

__all__ = ["CREATE_MODES", "RuntimeOptions"]

#: What ``Runtime.open_session(create=...)`` accepts.
CREATE_MODES = ("if_missing", "new", "never")


def _seconds(
    low: float, *, allow_none: bool = False
) -> Callable[[object, attrs.Attribute[Any], Any], None]:
    """An attrs validator: a finite number of seconds in ``(low, 1e9]``."""

    def check(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if value is None and allow_none:
            return
        if (
            not isinstance(value, int | float)
            or isinstance(value, bool)
            or not math.isfinite(value)
            or value <= low
            or value > 1e9
        ):
            raise InvalidArgumentError(
                f"{attribute.name} must be a finite number > {max(low, 0)}, not {value!r}"
            )

    return check


@attrs.frozen(kw_only=True)
class RuntimeOptions:
    """The runtime's options, checked when made (:class:`~stores.InvalidArgumentError`);
    see :func:`~runtime.open_runtime` for what each means."""

    lease_ttl: float = attrs.field(default=10.0, validator=_seconds(0.0))
    idle_timeout: float = attrs.field(default=30.0, validator=_seconds(-1.0))
    batch_window: float = attrs.field(default=0.002, validator=_seconds(-1.0))
    poll_interval: float = attrs.field(default=0.025, validator=_seconds(0.0))
    publish_statistics: float | None = attrs.field(
        default=None,
        validator=_seconds(0.0, allow_none=True),
    )
