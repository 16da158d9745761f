"""The agent run loop: model turns, tools, handoffs, checkpoint barriers, exact recovery.

(:class:`Runner` in ``_runner`` starts, resumes and replays runs; this module is the loop.)

Barriers (what is durable when):

* before every model request the runtime is flushed, so the request's inputs -- the
  history and every checkpointed entry -- are durable;
* the checkpoint is saved after each model turn (the assistant message and its tool
  calls) and after each tool result (in completion order);
* a tool body starts only after a ``tool_started`` record for its call is checkpointed and
  flushed, so recovery can tell "never started" from "may have run".

Resume settles every call left without a result: never started -> it runs; started and
the tool is idempotent -> it runs again; started and not idempotent -> a
``TOOL_OUTCOME_UNKNOWN`` error result tells the model to verify before retrying. A
checkpoint that ends with the model's final answer completes with it (no model call). A
completed run is *replayed*: only the terminal event, no model call, no hooks, the stored
output, and the history append re-applied (idempotently).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import trio

from runtime import JSON, CommitPendingError, InvalidArgumentError, Runtime

from ._agent import Agent
from ._checkpoints import CheckpointOptions, RunHead, RunSnapshot
from ._completion import finish_run
from ._errors import AgentNotFoundError, MaxTurnsExceededError, is_interruption
from ._events import (
    AwaitingApproval,
    ModelTurn,
    RunCompleted,
    RunEvent,
    RunHooks,
    RunResult,
    RunStarted,
    RunStopped,
    ToolFinished,
)
from ._history import History
from ._models import Model, ModelRequest, ModelResponse, StreamingModel, Usage
from ._output import OutputSchema, OutputValidationError
from ._stopping import StopRequested
from ._tool_calls import abort_undispatched, settle
from ._tools import RunContext
from ._transcript import (
    AssistantMessage,
    Entry,
    SidecarEntry,
    ToolCall,
    ToolResult,
    pending_tool_calls,
)
from ._typed_output import check_storable

__all__ = ["Run", "drive"]


logger = logging.getLogger("tidelog")


@attrs.define(kw_only=True)
class Run:
    """One run in progress: what it was started with, and how far it got."""

    runtime: Runtime
    entry_agent: Agent
    agent: Agent
    run_id: str
    session_id: str | None
    options: CheckpointOptions | None
    max_turns: int
    hooks: RunHooks
    emit: Callable[[RunEvent], Awaitable[None]]
    context: Any
    history: History
    prior: list[Entry] = attrs.Factory(list)
    entries: list[Entry] = attrs.Factory(list)
    saved: int = 0
    usage: Usage = attrs.Factory(Usage)
    turns: int = 0
    context_state: JSON = None
    save_lock: trio.Lock = attrs.Factory(trio.Lock)
    #: The completed checkpoint is saved: nothing may record the run as failed after.
    completed: bool = False
    #: Calls whose ``tool_started`` record was written, and those whose body then started.
    announced: set[str] = attrs.Factory(set)
    dispatched: set[str] = attrs.Factory(set)
    #: Ask streaming models for deltas (``Runner.run_streamed``).
    stream: bool = False
    #: Why the run was asked to stop (``request_stop``), once it was; the model request
    #: in flight then, if any, is cancelled through ``model_scope``.
    stop_reason: str | None = None
    model_scope: trio.CancelScope | None = None
    #: The run call's ``output_type`` (overrides every agent's), if it had one.
    output_override: OutputSchema | None = None

    @property
    def output(self) -> OutputSchema | None:
        """The output type the final answer must fit."""
        return self.output_override or self.agent.output

    def request_stop(self, reason: str) -> None:
        """Stop at the next safe point: now if a model request is in flight (nothing of
        its turn is saved yet), else after the running tool bodies, before the next
        model request."""
        self.stop_reason = reason
        if self.model_scope is not None:
            self.model_scope.cancel()

    @property
    def ctx(self) -> RunContext:
        """The context tools and dynamic instructions see."""
        return RunContext(
            self.run_id,
            self.session_id,
            self.agent.name,
            self.context,
            turn=self.turns,
            transcript=(*self.prior, *self.entries),
        )

    def head(
        self, status: str, *, output: JSON = None, error: BaseException | None = None
    ) -> RunHead:
        """The checkpoint head for the run as it stands."""
        return RunHead(
            self.agent.name,
            usage=self.usage.to_json(),
            turns=self.turns,
            status=status,  # type: ignore[arg-type]
            output=output,
            error=None if error is None else {"type": type(error).__name__, "message": str(error)},
            context_state=self.context_state,
            updated_at=time.time(),
            session_id=self.session_id,
        )

    async def save(self, status: str = "running", *, error: BaseException | None = None) -> None:
        """Checkpoint the entries added since the last save, with a new head.

        A :class:`~stores.CommitPendingError` means they *were* accepted (queued, retried
        in the background): they count as saved, so that no later save sends them again.
        The save is shielded from cancellation (one short commit): a save cancelled after
        its commit started could not tell whether its entries landed, and the
        interrupted checkpoint would then write them twice."""
        if self.options is None:
            return
        async with self.save_lock:
            new = self.entries[self.saved :]
            count = len(self.entries)
            try:
                with trio.CancelScope(shield=True):
                    await self.options.checkpointer.append(
                        self.run_id, new, self.head(status, error=error)
                    )
            except CommitPendingError:
                self.saved = count
                raise
            self.saved = count
        await trio.lowlevel.checkpoint_if_cancelled()

    async def barrier(self) -> None:
        """Make everything recorded so far durable (before model requests, tool bodies):
        this run's checkpoint and its conversation, whatever other sessions are doing."""
        homes = []
        if self.options is not None:
            homes.append(self.options.checkpointer.home(self.run_id))
        if self.session_id is not None:
            homes.append(self.history.home(self.session_id))
        by_runtime: dict[int, tuple[Runtime, list[str]]] = {}
        for home in homes:
            if home is not None:
                by_runtime.setdefault(id(home.runtime), (home.runtime, []))[1].append(
                    home.session_id
                )
        for runtime, sessions in by_runtime.values():  # one fsync barrier per runtime
            await runtime.flush_sessions(sessions)
        if not by_runtime:
            await trio.lowlevel.checkpoint()

    async def record(self, result: ToolResult, how: str) -> None:
        """Add a tool result, checkpoint it, report it."""
        self.entries.append(result)
        await self.save()
        await self.emit(ToolFinished(result, how))
        await self.hooks.on_tool_result(self.ctx, result)

    # -- turns -------------------------------------------------------------------------

    async def turn(self) -> ModelResponse | list[ToolCall]:
        """One model turn and its tools: the model's response if it is done, else the
        calls that await a decision (none: ask the model again)."""
        if self.turns >= self.max_turns:
            raise MaxTurnsExceededError(self.run_id, self.max_turns)
        model = self.agent.model or self.entry_agent.model
        if model is None:
            raise InvalidArgumentError(f"agent {self.agent.name!r} has no model")
        await self.barrier()
        output = self.output
        request = ModelRequest(
            self.agent.name,
            self.agent.system_prompt(self.ctx),
            tuple(self.prior + self.entries),
            self.agent.tool_schemas(),
            None if output is None else output.request_form(),
        )
        if self.stop_reason is not None:
            raise StopRequested(self.stop_reason)
        with trio.CancelScope() as self.model_scope:
            response = await self.ask(model, request)
        self.model_scope = None
        if self.stop_reason is not None:  # the request was cancelled, or just answered
            raise StopRequested(self.stop_reason)
        self.turns += 1
        self.usage = self.usage + response.usage
        calls = [
            ToolCall(c.call_id, c.name, c.arguments)
            for c in (call.with_id() for call in response.tool_calls)
        ]
        new: list[Entry] = []
        if response.text or not calls:
            usage = response.usage.entry_json()
            new.append(AssistantMessage(response.text, agent=self.agent.name, usage=usage))
        new.extend(calls)
        self.entries.extend(new)
        await self.save()
        await self.emit(ModelTurn(self.agent.name, tuple(new)))
        await self.hooks.on_model_turn(self.ctx, tuple(new))
        if not calls:
            return response
        return await settle(self, calls, resuming=False)

    async def ask(self, model: Model, request: ModelRequest) -> ModelResponse:
        """The model's answer; streamed (deltas emitted as they come) when the run
        streams and the model can. Nothing of a turn is checkpointed before its whole
        response is in: a crash mid-stream resumes by asking again."""
        if not (self.stream and isinstance(model, StreamingModel)):
            return await model.respond(request)
        response: ModelResponse | None = None
        events = model.stream(request)
        try:
            async for event in events:
                if isinstance(event, ModelResponse):
                    response = event
                else:
                    await self.emit(event)
        finally:
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                await aclose()
        if response is None:
            raise InvalidArgumentError(f"the model's stream for {request.agent!r} had no response")
        return response

    async def pause(self, waiting: list[ToolCall]) -> RunResult:
        """Checkpoint the run as awaiting decisions on ``waiting`` and say so."""
        if self.options is None:
            names = ", ".join(sorted({c.name for c in waiting}))
            raise InvalidArgumentError(
                f"the run asks for approval of {names}: a run awaiting approval must be "
                "resumable, so run it with a checkpoint (CheckpointOptions)"
            )
        await self.save("awaiting_approval")
        return attrs.evolve(
            self.result(None, None, None),
            status="awaiting_approval",
            pending_approvals=tuple(waiting),
        )

    def result(self, output: JSON, finish_reason: str | None, final: Any) -> RunResult:
        """The :class:`RunResult` of the run as it stands."""
        return RunResult(
            self.run_id,
            output,
            tuple(self.entries),
            self.usage,
            self.agent.name,
            finish_reason,
            final,
        )

    async def finish(self, response: ModelResponse) -> RunResult:
        """Complete the run with the model's final answer (validated against the agent's
        output type, if it has one: :class:`OutputValidationError` fails the run)."""
        output: JSON = response.text
        final: Any = response.text
        if self.output is not None:
            output, final = self.output.parse(self.agent.name, response.text)
            check_storable(self.run_id, output)
        await self.complete(output)
        return self.result(output, response.finish_reason or "stop", final)

    async def finish_stored(self) -> RunResult | None:
        """Complete a resumed run with the final answer its checkpoint already holds: its
        last saved model turn had no tool calls, and the completion after it failed (or
        was not known to land). ``None`` when there is none, or when it does not fit the
        output type (that failed the run: the model is asked again)."""
        if self.turns == 0:  # the entries are the input: no answer of this run's model
            return None
        last = next((e for e in reversed(self.entries) if not isinstance(e, SidecarEntry)), None)
        if not isinstance(last, AssistantMessage):
            return None
        try:
            return await self.finish(ModelResponse(last.text))
        except OutputValidationError:
            return None

    async def complete(self, output: JSON) -> None:
        """Save the completed run (with its history segment).

        Once the completed checkpoint is saved, :attr:`completed` is True: a failure
        after that (the history step of the two-step form) leaves the run completed, and
        re-issuing it replays the stored result and heals the missing segment."""
        head = self.head("completed", output=output)
        meta: dict[str, JSON] | None = (
            None if self.context_state is None else {"context_state": self.context_state}
        )

        def saved() -> None:
            self.completed = True
            self.saved = len(self.entries)

        with trio.CancelScope(shield=True):  # as save(): never half-known
            try:
                await self._complete(head, meta, saved)
            except CommitPendingError:
                saved()  # accepted (retried in the background): the run must not be failed
                raise
        await trio.lowlevel.checkpoint_if_cancelled()

    async def _complete(
        self,
        head: RunHead,
        meta: dict[str, JSON] | None,
        saved: Callable[[], None],
    ) -> None:
        if self.options is not None and self.session_id is not None:
            await finish_run(
                self.options.checkpointer,
                self.history,
                session_id=self.session_id,
                run_id=self.run_id,
                new_entries=self.entries[self.saved :],
                head=head,
                run_entries=self.entries,
                meta=meta,
                on_saved=saved,
            )
        elif self.options is not None:
            await self.options.checkpointer.append(self.run_id, self.entries[self.saved :], head)
            saved()
        elif self.session_id is not None:
            await self.history.append(self.session_id, self.entries, run_id=self.run_id, meta=meta)
            saved()


async def drive(run: Run, snapshot: RunSnapshot | None, new_entries: list[Entry]) -> RunResult:
    """The loop of a new or resumed run, with its failure paths."""
    if run.session_id is not None:
        run.prior = await run.history.load(run.session_id)
    resuming = snapshot is not None
    if snapshot is not None:
        active = run.agent.find(snapshot.head.agent)
        if active is None:
            raise AgentNotFoundError(run.run_id, snapshot.head.agent)
        run.agent = active
        run.entries = list(snapshot.entries)
        run.saved = len(run.entries)
        run.usage = Usage.from_json(snapshot.head.usage)
        run.turns = snapshot.head.turns
        run.context_state = snapshot.head.context_state
    else:
        run.entries = new_entries
        await run.save()
    await run.emit(RunStarted(run.run_id, run.agent.name, "resumed" if resuming else "new"))
    await run.hooks.on_run_start(run.ctx)
    try:
        waiting: list[ToolCall] = []
        result: RunResult | None = None
        if resuming:
            waiting = await settle(run, pending_tool_calls(run.entries), resuming=True)
            if not waiting:  # a saved final answer is never asked for again
                result = await run.finish_stored()
        while result is None and not waiting:
            outcome = await run.turn()
            if isinstance(outcome, ModelResponse):
                result = await run.finish(outcome)
            else:
                waiting = outcome
        if result is None:
            result = await run.pause(waiting)
    except StopRequested as stop:
        await save_stopped(run, stop)
        result = attrs.evolve(
            run.result(None, None, None), status="interrupted", stop_reason=stop.reason
        )
        await run.emit(RunStopped(result))
        return result
    except BaseException as exc:
        if not run.completed:  # a completed run stays completed, whatever failed after
            await save_stopped(run, exc)
        raise
    if result.status == "awaiting_approval":
        await run.emit(AwaitingApproval(result))
        return result
    await run.emit(RunCompleted(result))
    await run.hooks.on_run_end(run.ctx, result)
    return result


async def save_stopped(run: Run, exc: BaseException) -> None:
    """Checkpoint a run that stopped: ``interrupted`` (cancellation, Ctrl-C -- with the
    calls that were announced but never dispatched marked as such) or ``failed`` (with
    the error). Shielded; never masks the original error."""
    stopped = isinstance(exc, StopRequested)  # recorded with its reason
    status = "interrupted" if stopped or is_interruption(exc) else "failed"
    abort_undispatched(run)
    with trio.CancelScope(shield=True):
        try:
            await run.save(status, error=exc if status == "failed" or stopped else None)
        except Exception as save_error:  # never mask the original error
            logger.warning("could not checkpoint run %s as %s: %r", run.run_id, status, save_error)
