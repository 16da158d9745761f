"""The inspector's HTTP errors: a status and a JSON body naming the parameter at fault."""

from __future__ import annotations

from runtime import JSON, TidelogError

__all__ = ["ApiError"]


class ApiError(TidelogError):
    """A request the inspector refuses: answered with ``status`` and the JSON body
    ``{"error": message, "parameter": name-or-null}``. Raised inside the request handlers
    (never to the embedding program)."""

    def __init__(
        self,
        status: int,
        message: str,
        parameter: str | None = None,
        extra: dict[str, JSON] | None = None,
    ) -> None:
        """Refuse with HTTP ``status``; ``parameter`` names the query or body field at
        fault (``None`` when no single one is); ``extra``: more fields of the body (e.g.
        ``decision``: how a call was already decided)."""
        super().__init__(message)
        self.status = status
        self.message = message
        self.parameter = parameter
        self.extra = dict(extra or {})

    def body(self) -> dict[str, JSON]:
        """The JSON body of the answer."""
        return {**self.extra, "error": self.message, "parameter": self.parameter}
