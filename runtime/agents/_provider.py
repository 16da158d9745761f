"""What the provider adapters share: the retry policy, error translation, the retry loops.

Who retries: **tidelog, not the SDK.** The adapters build (or copy) the SDK client with
``max_retries=0`` and retry here, because

* one budget covers every failure of a turn: the SDK retries only a request that failed
  before its body, never a stream that broke in the middle, which tidelog re-requests
  (telling a streaming caller with :class:`StreamRestarted`);
* the budget is bounded in attempts *and* in time (the SDK counts attempts only, and
  waits up to two minutes on a ``Retry-After``), so a run fails in bounded time;
* retries would otherwise multiply (the SDK's 2 inside each of ours);
* a failure that ends the run is one tidelog error (:class:`ModelError`) with the
  provider, status and attempt count, recorded on the run's checkpoint.

Backoff is exponential with jitter; a ``Retry-After`` (or ``retry-after-ms``) header is
honoured as given when it fits the remaining budget -- if it does not, the run fails at
once rather than sleep past its budget. Cancellation aborts the request in flight at once
(the SDKs run on anyio, whose trio backend maps trio's cancellation onto the socket).
"""

from __future__ import annotations

import email.utils
import logging
import random
import sys
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from typing import Any, Self, TypeVar

import attrs
import trio

from stores import InvalidArgumentError

from ._errors import (
    ModelConnectionError,
    ModelError,
    ModelRateLimitError,
    ModelRequestError,
    ModelResponseError,
    ModelServerError,
    ModelTimeoutError,
)
from ._models import ModelRequest, ModelResponse, ModelStreamEvent, StreamRestarted

__all__ = [
    "ProviderModel",
    "RetryPolicy",
    "retry_call",
    "retry_stream",
    "stream_cut",
    "translate",
]

logger = logging.getLogger("tidelog")
T = TypeVar("T")


@attrs.frozen
class RetryPolicy:
    """How a model adapter retries a failed request (timeouts, broken connections, 429,
    5xx, 408/409, an error mid-stream).

    ``max_attempts``: requests per turn, the first included (1: never retry).
    ``initial_delay`` doubles per retry up to ``max_delay``, less up to ``jitter`` (a
    fraction) at random. ``budget``: seconds a turn may spend on attempts and waits; a
    retry whose wait would end past it is not made. A ``Retry-After`` header replaces
    the computed wait.

    Raises :class:`~stores.InvalidArgumentError` for values out of range."""

    max_attempts: int = 4
    initial_delay: float = 0.5
    max_delay: float = 20.0
    budget: float = 120.0
    jitter: float = 0.25

    def __attrs_post_init__(self) -> None:
        if type(self.max_attempts) is not int or self.max_attempts < 1:
            raise InvalidArgumentError(f"max_attempts must be an int >= 1: {self.max_attempts!r}")
        for name in ("initial_delay", "max_delay", "budget"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or value < 0:
                raise InvalidArgumentError(f"{name} must be a number >= 0: {value!r}")
        if not 0 <= self.jitter <= 1:
            raise InvalidArgumentError(f"jitter must be within [0, 1]: {self.jitter!r}")

    def wait(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait before attempt ``attempt + 1``."""
        if retry_after is not None:
            return max(0.0, retry_after)
        delay = min(self.initial_delay * 2.0 ** (attempt - 1), self.max_delay)
        return delay * (1 - self.jitter * random.random())


def retry_after(headers: Any) -> float | None:
    """The server's ``retry-after-ms`` / ``retry-after`` (seconds or an HTTP date)."""
    if headers is None:
        return None
    for name, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return float(value) / divisor
        except ValueError:
            parsed = email.utils.parsedate_tz(value)
            if parsed is not None:
                return float(email.utils.mktime_tz(parsed) - time.time())
    return None


def stream_cut(provider: str, marker: str) -> ModelConnectionError:
    """The error of a stream that ended before its end ``marker`` (the server closed it
    early, or answered a stream request with one JSON body): a broken connection,
    retried like one, never taken as an answer."""
    return ModelConnectionError(
        provider,
        f"the stream ended before the answer was complete (no {marker})",
        retryable=True,
    )


@attrs.frozen
class Failure:
    """A failed attempt, translated: the error to raise if it is the last, and the
    server's ``Retry-After``."""

    error: ModelError
    retry_after: float | None


def translate(provider: str, sdk: Any, exc: BaseException, attempts: int) -> Failure | None:
    """Translate an SDK exception (``sdk`` is the ``openai`` or ``anthropic`` module:
    both SDKs share one exception design) into a :class:`Failure`; ``None`` if it is not
    a provider failure (a bug, a cancellation: let it through)."""
    if isinstance(exc, ModelError):  # raised by an adapter itself (e.g. an error event)
        again = type(exc)(
            exc.provider, exc.message, status=exc.status, attempts=attempts, retryable=exc.retryable
        )
        return Failure(again, None)
    message = str(getattr(exc, "message", None) or exc) or type(exc).__name__
    kw: dict[str, Any] = {"attempts": attempts}
    if isinstance(exc, sdk.APITimeoutError):
        return Failure(ModelTimeoutError(provider, message, retryable=True, **kw), None)
    if isinstance(exc, sdk.APIConnectionError):
        return Failure(ModelConnectionError(provider, message, retryable=True, **kw), None)
    if isinstance(exc, sdk.APIResponseValidationError):
        return Failure(ModelResponseError(provider, message, **kw), None)
    if isinstance(exc, sdk.APIStatusError):
        status = exc.status_code
        after = retry_after(exc.response.headers)
        if status == 429:
            error: ModelError = ModelRateLimitError(
                provider, message, status=status, retryable=True, **kw
            )
        elif status >= 500 or status in (408, 409) or status < 400:  # < 400: error event
            error = ModelServerError(provider, message, status=status, retryable=True, **kw)
        else:
            error = ModelRequestError(provider, message, status=status, **kw)
        return Failure(error, after)
    if isinstance(exc, sdk.APIError):  # an error event inside a stream
        return Failure(ModelServerError(provider, message, retryable=True, **kw), None)
    for name in ("httpx2", "httpx"):  # the SDK's HTTP client, raising mid-stream unwrapped
        httpx = sys.modules.get(name)
        if httpx is not None and isinstance(exc, httpx.TimeoutException):
            return Failure(ModelTimeoutError(provider, message, retryable=True, **kw), None)
        if httpx is not None and isinstance(exc, httpx.TransportError):
            return Failure(ModelConnectionError(provider, message, retryable=True, **kw), None)
    if isinstance(exc, ValueError | KeyError | TypeError | AttributeError):
        return Failure(ModelResponseError(provider, f"unreadable answer: {message}", **kw), None)
    return None


def _next_wait(
    policy: RetryPolicy, failure: Failure, attempt: int, deadline: float
) -> float | None:
    """The wait before the next attempt, or ``None`` to give up."""
    if not failure.error.retryable or attempt >= policy.max_attempts:
        return None
    wait = policy.wait(attempt, failure.retry_after)
    if trio.current_time() + wait > deadline:
        return None
    return wait


async def retry_call(
    provider: str,
    sdk: Any,
    policy: RetryPolicy,
    call: Callable[[], Awaitable[ModelResponse]],
) -> ModelResponse:
    """``call()`` with retries; raises the last failure as a :class:`ModelError`."""

    async def once() -> AsyncIterator[ModelStreamEvent]:
        yield await call()

    async with aclosing(retry_stream(provider, sdk, policy, once)) as events:
        async for event in events:
            if isinstance(event, ModelResponse):
                return event
    raise AssertionError("unreachable: the call returned no response")  # pragma: no cover


async def retry_stream(
    provider: str,
    sdk: Any,
    policy: RetryPolicy,
    open_stream: Callable[[], AsyncIterator[ModelStreamEvent]],
) -> AsyncGenerator[ModelStreamEvent, None]:
    """Yield the events of ``open_stream()`` with retries. A stream that fails after it
    yielded something is requested again after a :class:`StreamRestarted`."""
    deadline = trio.current_time() + policy.budget
    attempt = 0
    while True:
        attempt += 1
        yielded = False
        try:
            async with aclosing(open_stream()) as events:  # type: ignore[type-var]
                async for event in events:
                    yielded = True
                    yield event
            return
        except Exception as exc:
            failure = translate(provider, sdk, exc, attempt)
            if failure is None:
                raise
            wait = _next_wait(policy, failure, attempt, deadline)
            if wait is None:
                raise failure.error from exc
        logger.info("%s: stream attempt %d failed (%s); retrying", provider, attempt, failure.error)
        if yielded:
            yield StreamRestarted(str(failure.error))
        await trio.sleep(wait)


class ProviderModel:
    """The part of every adapter that is not the wire format: the client's life, the
    retries, ``respond`` and ``stream`` (:class:`~runtime.agents.StreamingModel`).

    An adapter that made its own client owns it: close it with ``aclose()`` or ``async
    with`` (under trio the SDK cannot close it from a finaliser). A client passed in is
    the caller's; the adapter uses a copy of it with the SDK's own retries off."""

    provider: str = ""

    #: The SDK module (``openai``, ``anthropic``): its exceptions are translated.
    sdk: Any = None
    #: The SDK's async client class, by name.
    client_class: str = ""

    def __init__(
        self,
        model: str,
        *,
        client: Any,
        base_url: str | None,
        api_key: str | None,
        retry: RetryPolicy | None,
        timeout: float,
        settings: dict[str, Any] | None,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise InvalidArgumentError(f"model must be a non-empty str: {model!r}")
        retry = RetryPolicy() if retry is None else retry
        if not isinstance(retry, RetryPolicy):
            raise InvalidArgumentError("retry must be a RetryPolicy or None")
        if not isinstance(timeout, int | float) or not timeout > 0:
            raise InvalidArgumentError(f"timeout must be a positive number: {timeout!r}")
        self.model = model
        self._owns = client is None
        if client is None:
            self.client = self.new_client(base_url=base_url, api_key=api_key, timeout=timeout)
        else:
            self.client = client.with_options(max_retries=0)
        self.retry = retry
        self.timeout = float(timeout)
        self.settings = dict(settings or {})

    def new_client(self, *, base_url: str | None, api_key: str | None, timeout: float) -> Any:
        """The SDK client the adapter makes (and owns) when none is given; its retries
        off. (Both SDKs' async clients take the same arguments.)"""
        make = getattr(
            self.sdk, "AsyncAnthropic" if self.provider == "anthropic" else "AsyncOpenAI"
        )
        return make(base_url=base_url, api_key=api_key, max_retries=0, timeout=timeout)

    async def respond(self, request: ModelRequest) -> ModelResponse:
        """Answer one request (with retries). Raises :class:`ModelError`."""
        return await retry_call(self.provider, self.sdk, self.retry, lambda: self._once(request))

    def stream(self, request: ModelRequest) -> AsyncGenerator[ModelStreamEvent, None]:
        """Stream one answer (with retries): deltas, then the :class:`ModelResponse`.
        Raises :class:`ModelError`."""
        return retry_stream(self.provider, self.sdk, self.retry, lambda: self._stream_once(request))

    async def _once(self, request: ModelRequest) -> ModelResponse:
        raise NotImplementedError

    def _stream_once(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        raise NotImplementedError

    async def aclose(self) -> None:
        """Close the client if this adapter made it."""
        if self._owns:
            await self.client.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
