"""Function tools: a Python function, its JSON schema, argument validation, the call.

:func:`function_tool` turns a sync or async function into a :class:`FunctionTool`. Its
parameters become a JSON schema (pydantic, see ``_schema``), its docstring the
descriptions. Before the body runs, the model's arguments are validated against the
annotations and coerced (``"3"`` for an ``int`` becomes ``3``, a dict for an attrs or
dataclass parameter becomes an instance); an invalid call raises
:class:`ToolArgumentsError`, which the run loop turns into an error result telling the
model what was wrong (the run goes on). Async bodies run on the trio thread; sync bodies
in a worker thread (``trio.to_thread.run_sync``). ``timeout`` bounds one call.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Awaitable, Callable
from typing import Any, Literal, TypeAlias, get_type_hints, overload

import attrs
import pydantic
import pydantic_core
import trio

from stores import JSON, InvalidArgumentError, decode_json, encode_json

from ._models import UNPARSED_ARGUMENTS
from ._parts import Part, parts_of
from ._schema import describe_errors, parse_docs, pydantic_type, strict_schema
from ._sidecars import DEFAULT_SNAPSHOT_QUOTA, CallSink
from ._transcript import Entry, SidecarEntry, ToolCall

__all__ = [
    "ApprovalPolicy",
    "FunctionTool",
    "RunContext",
    "ToolArgumentsError",
    "Verdict",
    "function_tool",
]


@attrs.define
class RunContext:
    """What a tool (or dynamic instructions) sees of the run: ids, the active agent, and
    the caller's own ``context`` object (not persisted: pass it again on resume).

    A tool's context also has ``call_id`` (its call) and can :meth:`record` sidecar
    events and :meth:`snapshot_file` before changing a file; elsewhere (instructions,
    hooks) ``call_id`` is ``None`` and those raise :class:`InvalidArgumentError`."""

    run_id: str
    session_id: str | None
    agent: str
    context: Any = None
    call_id: str | None = None
    #: Model turns of this run so far (resumes included): 1 while the tools of the first
    #: turn run, 0 in the instructions of the first request.
    turn: int = 0
    #: The conversation so far -- the history loaded for the run, then this run's entries
    #: (the messages the model has seen, and the tool calls being run): read-only.
    transcript: tuple[Entry, ...] = ()
    _sink: CallSink | None = attrs.field(default=None, repr=False, alias="sink")

    def _call_sink(self, what: str) -> CallSink:
        if self._sink is None:
            raise InvalidArgumentError(f"{what} works only in a tool call's context")
        return self._sink

    async def record(self, kind: str, data: dict[str, JSON]) -> SidecarEntry:
        """Record a sidecar event of this call: ``kind`` (not a conversation kind nor one
        the loop records: tool_started, tool_aborted, approval_*), ``data`` a JSON object
        to which ``"call_id"`` is added. It is checkpointed before the call's result (with
        a checkpoint; else written with the run's history segment) and the conversation
        ignores it. Async tools only (a sync body: ``trio.from_thread.run``).

        Raises, recording nothing: :class:`InvalidArgumentError` (bad kind or data, over
        the event size limit, not in a tool call). Once added, the entry is the run's:
        a failing checkpoint save raises as the loop's own saves do
        (:class:`CommitPendingError`: accepted, being retried; a store error: the entry
        is written with the run's next save)."""
        return await self._call_sink("RunContext.record").record(kind, data)

    async def snapshot_file(
        self, path: str | os.PathLike[str], *, quota_bytes: int = DEFAULT_SNAPSHOT_QUOTA
    ) -> SidecarEntry:
        """Record a ``file_snapshot`` of ``path`` as it is now (its bytes, or that it does
        not exist), to call before the tool changes it: ``restore_session`` can write it
        back. ``quota_bytes`` bounds the snapshot content stored per session (this run's
        and the conversation's snapshots together): over it, or over the event size
        limit, the snapshot is recorded as ``truncated`` without content, and a restore
        skips that path. Raises as :meth:`record`; also for a directory."""
        sink = self._call_sink("RunContext.snapshot_file")
        return await sink.snapshot_file(path, quota_bytes)


class ToolArgumentsError(InvalidArgumentError):
    """A model's call does not fit the tool's parameters; ``str()`` says why, for the
    model. Raised by :meth:`FunctionTool.validate` before the body ever runs (an
    :class:`~stores.InvalidArgumentError`, so also a ``ValueError``)."""


ToolBody: TypeAlias = Callable[..., Any]
#: Validates a call's arguments into the body's keyword arguments.
Validator: TypeAlias = Callable[[dict[str, JSON]], dict[str, Any]]


#: What an approval policy answers for a call: run it, refuse it, or ask a person.
Verdict: TypeAlias = Literal["allow", "deny", "ask"]
#: ``policy(ctx, call)`` -> a :data:`Verdict`, or an awaitable of one.
ApprovalPolicy: TypeAlias = Callable[[RunContext, ToolCall], Verdict | Awaitable[Verdict]]


def _no_validation(arguments: dict[str, JSON]) -> dict[str, Any]:
    return dict(arguments)


@attrs.frozen
class FunctionTool:
    """A tool the model may call. Build it with :func:`function_tool`.

    ``idempotent`` declares whether running the body twice for one call is harmless.
    On resume, a call whose body started but whose result was never recorded is re-run
    only if the tool is idempotent; otherwise the model gets a ``TOOL_OUTCOME_UNKNOWN``
    error result and must verify before retrying. ``strict``: the provider is asked to
    hold the model to the schema exactly (set only when the schema allows it).
    ``timeout``: seconds one call may take (``None``: no limit). ``needs_approval``:
    ``True`` to ask a person before every call, or a policy ``(ctx, call) -> "allow" |
    "deny" | "ask"`` (sync or async) deciding per call (see ``runtime.agents.approve``).
    """

    name: str
    description: str
    parameters: dict[str, JSON]
    body: ToolBody = attrs.field(repr=False)
    idempotent: bool = False
    takes_context: bool = False
    strict: bool = False
    timeout: float | None = None
    validator: Validator = attrs.field(default=_no_validation, repr=False)
    needs_approval: bool | ApprovalPolicy = False

    def validate(self, arguments: dict[str, JSON]) -> dict[str, Any]:
        """The body's keyword arguments for a call, validated and coerced.

        Raises :class:`ToolArgumentsError` saying what is wrong."""
        if set(arguments) == {UNPARSED_ARGUMENTS}:
            raise ToolArgumentsError(
                f"the arguments of {self.name!r} were not a JSON object: "
                f"{arguments[UNPARSED_ARGUMENTS]!r}; send a JSON object that fits the schema"
            )
        return self.validator(arguments)

    async def invoke(
        self, ctx: RunContext, arguments: dict[str, JSON]
    ) -> str | tuple[str, tuple[Part, ...]]:
        """Validate ``arguments``, run the body (within :attr:`timeout`), and return its
        output as text (JSON if it is not a ``str``), or, when the body returned parts
        (an ``ImagePart``, ``FilePart`` or ``TextPart``, or a list of them and ``str``),
        as ``(text, parts)``: the leading text, then the other parts.

        Raises :class:`ToolArgumentsError` (invalid call, the body did not run),
        :class:`trio.TooSlowError` (timeout), or whatever the body raises."""
        return await self.call(ctx, self.validate(arguments))

    async def call(
        self, ctx: RunContext, kwargs: dict[str, Any]
    ) -> str | tuple[str, tuple[Part, ...]]:
        """Run the body on ``kwargs`` as :meth:`validate` returned them (the run loop
        validates each call once, before it records that the body may start), within
        :attr:`timeout`, and return its output as :meth:`invoke` does.

        Raises :class:`trio.TooSlowError` (timeout), or whatever the body raises."""
        call = functools.partial(self.body, ctx, **kwargs) if self.takes_context else None
        call = call or functools.partial(self.body, **kwargs)
        with trio.fail_after(self.timeout) if self.timeout is not None else _nothing():
            if inspect.iscoroutinefunction(self.body):
                result = await call()
            else:
                # A thread cannot be stopped: on timeout or cancellation the run stops
                # waiting for it, and its result (when it comes) is dropped.
                result = await trio.to_thread.run_sync(call, abandon_on_cancel=True)
        if isinstance(result, str):
            return result
        content = parts_of(result)
        return content if content is not None else _to_json_text(result)

    def schema(self) -> dict[str, JSON]:
        """The tool as a model sees it."""
        out: dict[str, JSON] = {
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
        }
        if self.strict:
            out["strict"] = True
        return out


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _to_json_text(value: Any) -> str:
    """A tool's non-text result as JSON (attrs classes, dataclasses, models included)."""
    try:
        return encode_json(value)
    except (InvalidArgumentError, TypeError, ValueError):
        pass
    jsonable = pydantic_core.to_jsonable_python(value, fallback=_attrs_fallback)
    return encode_json(decode_json(encode_json(jsonable)))


def _attrs_fallback(value: Any) -> Any:
    if attrs.has(type(value)):
        return attrs.asdict(value)
    raise TypeError(f"a tool returned {type(value).__name__}, which has no JSON form")


def _build(
    body: ToolBody,
    name: str | None,
    description: str | None,
    idempotent: bool,
    strict: bool,
    timeout: float | None,
) -> FunctionTool:
    if not callable(body):
        raise InvalidArgumentError(f"a tool must be a function, not {body!r}")
    if not isinstance(idempotent, bool) or not isinstance(strict, bool):
        raise InvalidArgumentError("idempotent and strict must be bools")
    if timeout is not None and (not isinstance(timeout, int | float) or not timeout > 0):
        raise InvalidArgumentError(f"timeout must be a positive number or None: {timeout!r}")
    params = list(inspect.signature(body).parameters.values())
    hints = get_type_hints(body, include_extras=True)
    takes_context = bool(params) and hints.get(params[0].name) is RunContext
    docs = parse_docs(body)
    fields: dict[str, Any] = {}
    for param in params[1:] if takes_context else params:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise InvalidArgumentError(
                f"tool {body.__name__!r}: parameter {param.name!r} must be a plain or "
                "keyword-only parameter (the model passes arguments by name)"
            )
        tp = pydantic_type(hints.get(param.name, Any))
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (tp, pydantic.Field(default, description=docs.params.get(param.name)))
    tool_name = name or body.__name__
    try:
        model = pydantic.create_model(
            tool_name, __config__=pydantic.ConfigDict(extra="forbid"), **fields
        )
        schema: dict[str, JSON] = model.model_json_schema()
    except (pydantic.PydanticSchemaGenerationError, pydantic.PydanticUserError, TypeError) as e:
        raise InvalidArgumentError(f"tool {tool_name!r}: no JSON schema for it: {e}") from e
    schema.pop("title", None)
    strict_form = strict_schema(schema) if strict else None
    defaults = {n for n, (_, f) in fields.items() if not f.is_required()}

    def validator(arguments: dict[str, JSON]) -> dict[str, Any]:
        if strict_form is not None:  # strict mode sends null for "use the default"
            arguments = {k: v for k, v in arguments.items() if v is not None or k not in defaults}
        try:
            parsed = model.model_validate(arguments)
        except pydantic.ValidationError as exc:
            raise ToolArgumentsError(
                f"invalid arguments for tool {tool_name!r}:\n{describe_errors(exc)}"
            ) from None
        return {n: getattr(parsed, n) for n in fields}

    return FunctionTool(
        name=tool_name,
        description=description if description is not None else docs.description,
        parameters=strict_form if strict_form is not None else schema,
        body=body,
        idempotent=idempotent,
        takes_context=takes_context,
        strict=strict_form is not None,
        timeout=timeout,
        validator=validator,
    )


@overload
def function_tool(fn: ToolBody, /) -> FunctionTool: ...


@overload
def function_tool(
    fn: ToolBody,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    idempotent: bool = False,
    strict: bool = True,
    timeout: float | None = None,
    needs_approval: bool | ApprovalPolicy = False,
) -> FunctionTool: ...


@overload
def function_tool(
    fn: None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    idempotent: bool = False,
    strict: bool = True,
    timeout: float | None = None,
    needs_approval: bool | ApprovalPolicy = False,
) -> Callable[[ToolBody], FunctionTool]: ...


def function_tool(
    fn: ToolBody | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    idempotent: bool = False,
    strict: bool = True,
    timeout: float | None = None,
    needs_approval: bool | ApprovalPolicy = False,
) -> FunctionTool | Callable[[ToolBody], FunctionTool]:
    """Declare a function (async, or sync: it then runs in a worker thread) as a tool:
    ``@function_tool`` or ``@function_tool(idempotent=True, timeout=30)``.

    The name defaults to the function's; the description to its docstring's (Google,
    NumPy or Sphinx style), which also describes each parameter. The JSON schema comes
    from the annotations (``Optional``, unions, ``Literal``, ``list[T]``, ``dict[str,
    T]``, attrs classes, dataclasses, TypedDicts, defaults); an unannotated parameter
    takes any JSON. A first parameter annotated :class:`RunContext` receives the run
    context. ``strict`` (default on) asks providers to enforce the schema exactly, when
    the schema can be closed (see :attr:`FunctionTool.strict`). ``needs_approval``: see
    :class:`FunctionTool` (``@function_tool(needs_approval=True)``).

    Raises :class:`~stores.InvalidArgumentError` for bad options, ``*args``/``**kwargs``
    or positional-only parameters, or an annotation with no JSON schema.
    """

    def wrap(body: ToolBody) -> FunctionTool:
        tool = _build(body, name, description, idempotent, strict, timeout)
        if not (isinstance(needs_approval, bool) or callable(needs_approval)):
            raise InvalidArgumentError(
                f"needs_approval must be a bool or a policy function, not {needs_approval!r}"
            )
        return attrs.evolve(tool, needs_approval=needs_approval)

    return wrap(fn) if fn is not None else wrap
