"""The :class:`Runner`: start, resume or replay a run (the loop itself is ``_loop``)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import attrs
import trio

from runtime import JSON, InvalidArgumentError, Runtime
from stores import validate_session_id

from ._agent import Agent
from ._approvals import APPROVAL_DECISION
from ._checkpoints import CheckpointOptions, RunSnapshot, begin_run
from ._errors import unwrap_group
from ._events import NO_HOOKS, RunCompleted, RunEvent, RunFailed, RunHooks, RunResult
from ._history import History
from ._loop import Run, drive
from ._models import Usage
from ._output import OutputSchema
from ._registry import history as runtime_history
from ._stopping import StopCursor, settle_cursor, stop_cursor, watch_stops
from ._transcript import Entry, UserMessage
from ._typed_output import output_schema, refuse_unstorable

__all__ = ["Runner"]

logger = logging.getLogger("tidelog")


class Runner:
    """Runs agents (after lovia's ``Runner``; lovia is the Python agent framework whose
    Session/Checkpoint/Runner design this layer follows)."""

    @staticmethod
    async def run(
        agent: Agent,
        input: str | Sequence[Entry],
        *,
        runtime: Runtime,
        session_id: str | None = None,
        checkpoint: CheckpointOptions | None = None,
        max_turns: int = 10,
        context: Any = None,
        hooks: RunHooks | None = None,
        history: History | None = None,
        output_type: Any = None,
    ) -> RunResult:
        """Run ``agent`` on ``input`` until the model answers without tool calls.

        ``output_type``: the type the final answer must fit, overriding the agents' own
        (see ``Agent(output_type=...)``); pass it again when replaying a completed run to
        get the output back as that type. An output that cannot be stored as JSON fails
        the run with :class:`OutputNotStorableError`, and so does re-issuing it.

        ``session_id``: load the conversation history first, and append this run's
        entries as a segment when it completes. ``checkpoint``: claim the run (a second
        runner of the same run_id, in any process or host, gets
        :class:`~stores.SessionOwnedError` before any model call, or waits with
        ``wait_for_owner``), then apply ``if_run_exists`` (resume, restart, fail,
        resume_only). On resume the new ``input`` is ignored: the checkpoint already holds
        the original input.

        Cancellation (or KeyboardInterrupt) saves an ``interrupted`` checkpoint, shielded,
        then propagates; any other exception saves ``failed`` and propagates -- unless the
        run's completed checkpoint was already saved (then it stays completed). Neither
        save ever masks the original error. A store error during a save aborts the run.

        The result's ``status`` is ``"completed"``, or ``"awaiting_approval"`` when a tool
        call needs a person's decision (``pending_approvals``; see ``approve``, and
        ``CheckpointOptions.wait_for_decisions`` to wait instead), or ``"interrupted"``
        when another process asked the run to stop (``request_stop``; ``stop_reason``).

        Raises: :class:`SessionOwnedError` (the run is live elsewhere),
        :class:`RunExistsError` / :class:`RunNotFoundError` (policy),
        :class:`AgentNotFoundError` (resume of an unknown agent),
        :class:`MaxTurnsExceededError`, the model's own errors, write errors of the
        checkpoint and history (see ``SessionWriter``).
        """

        async def ignore(event: RunEvent) -> None:
            pass

        return await _execute(
            RunRequest(
                agent=agent,
                input=input,
                runtime=runtime,
                session_id=session_id,
                checkpoint=checkpoint,
                max_turns=max_turns,
                context=context,
                hooks=hooks,
                history=history,
                emit=ignore,
                output=output_schema(output_type),
                stream=False,
            )
        )

    @staticmethod
    @asynccontextmanager
    async def run_streamed(
        agent: Agent,
        input: str | Sequence[Entry],
        *,
        runtime: Runtime,
        session_id: str | None = None,
        checkpoint: CheckpointOptions | None = None,
        max_turns: int = 10,
        context: Any = None,
        hooks: RunHooks | None = None,
        history: History | None = None,
        output_type: Any = None,
    ) -> AsyncIterator[trio.MemoryReceiveChannel[RunEvent]]:
        """Run as :meth:`run` in a background task and yield a channel of run events
        (``RunStarted``, ``ModelTurn``, ``ToolStarted``, ``ToolFinished``, ``Handoff``,
        then ``RunCompleted``, ``AwaitingApproval``, ``RunStopped`` or ``RunFailed``). A
        model that can stream (:class:`StreamingModel`) is asked to: its ``TextDelta``
        and ``ToolCallDelta`` events (and ``StreamRestarted`` when a turn is asked again
        after a failure) come as they arrive, before the turn's ``ModelTurn``.
        Checkpoints still record whole turns only: a crash mid-stream resumes by asking
        for the turn again. Leaving the block early cancels the run (which then
        checkpoints as interrupted)."""
        send, receive = trio.open_memory_channel[RunEvent](0)

        async def drive() -> None:
            async with send:
                try:
                    await _execute(
                        RunRequest(
                            agent=agent,
                            input=input,
                            runtime=runtime,
                            session_id=session_id,
                            checkpoint=checkpoint,
                            max_turns=max_turns,
                            context=context,
                            hooks=hooks,
                            history=history,
                            emit=send.send,
                            output=output_schema(output_type),
                            stream=True,
                        )
                    )
                except Exception as exc:
                    await send.send(RunFailed(exc, "failed"))

        async with trio.open_nursery() as nursery, receive:
            nursery.start_soon(drive)
            try:
                yield receive
            finally:
                nursery.cancel_scope.cancel()


@attrs.frozen(kw_only=True)
class RunRequest:
    """What ``Runner.run`` / ``run_streamed`` were called with, unchecked; ``emit``
    receives the run events, ``stream`` asks streaming models for deltas."""

    agent: Agent
    input: str | Sequence[Entry]
    runtime: Runtime
    session_id: str | None
    checkpoint: CheckpointOptions | None
    max_turns: int
    context: Any
    hooks: RunHooks | None
    history: History | None
    emit: Callable[[RunEvent], Awaitable[None]]
    stream: bool
    output: OutputSchema | None = None


def _check(request: RunRequest) -> History:
    """Check the request's arguments; the history the run uses."""
    if not isinstance(request.agent, Agent):
        raise InvalidArgumentError(f"agent must be an Agent, not {type(request.agent).__name__}")
    if request.session_id is not None:
        validate_session_id(request.session_id)
    max_turns = request.max_turns
    if type(max_turns) is not int or max_turns < 1:
        raise InvalidArgumentError(f"max_turns must be an int >= 1, not {max_turns!r}")
    if request.checkpoint is not None and not isinstance(request.checkpoint, CheckpointOptions):
        raise InvalidArgumentError("checkpoint must be CheckpointOptions or None")
    if request.hooks is not None and not isinstance(request.hooks, RunHooks):
        raise InvalidArgumentError("hooks must be a RunHooks instance or None")
    runtime = request.runtime
    if not isinstance(runtime, Runtime):
        raise InvalidArgumentError(f"runtime must be a Runtime, not {type(runtime).__name__}")
    if request.history is None:
        return runtime_history(runtime)
    if not isinstance(request.history, History):
        raise InvalidArgumentError("history must implement History or be None")
    return request.history


async def _execute(request: RunRequest) -> RunResult:
    """Run, resume or replay one run (the body of ``Runner.run``)."""
    history = _check(request)
    checkpoint = request.checkpoint
    given = request.input
    new_entries: list[Entry] = [UserMessage(given)] if isinstance(given, str) else list(given)
    while True:
        result, decided_since = await _attempt(request, checkpoint, history, new_entries)
        if decided_since is None:
            break
        assert checkpoint is not None
        await _wait_for_decisions(checkpoint, result, decided_since)
        # Continue the run now that it is decided (its input is in the checkpoint); the
        # decider may still hold the run for a moment after its decision committed.
        checkpoint = attrs.evolve(
            checkpoint, if_run_exists="resume_only", resume_from=None, wait_for_owner=True
        )
    if checkpoint is not None and checkpoint.delete_on_success and result.status == "completed":
        await checkpoint.checkpointer.delete(checkpoint.run_id)  # after the claim ended
    return result


async def _attempt(
    request: RunRequest,
    checkpoint: CheckpointOptions | None,
    history: History,
    new_entries: list[Entry],
) -> tuple[RunResult, int | None]:
    """Claim, then run, resume or replay the run once. With ``wait_for_decisions`` and a
    result awaiting approval, also the head of the run's session while the claim still
    held it (decisions come after it)."""
    agent, session_id = request.agent, request.session_id
    home = None if checkpoint is None else checkpoint.checkpointer.home(checkpoint.run_id)
    # Stop requests written from here on are for this run: read where they start before
    # the claim, so that none written once the claim is held can be missed.
    cursor: StopCursor | None = None
    if home is not None and checkpoint is not None:
        cursor = await stop_cursor(home.runtime, checkpoint.run_id)
    async with AsyncExitStack() as stack:
        snapshot: RunSnapshot | None = None
        if checkpoint is not None:
            # Claim the run before anything else: a runner of the same run elsewhere
            # makes this fail (or wait) before the first model call.
            await stack.enter_async_context(
                checkpoint.checkpointer.claim(checkpoint.run_id, wait=checkpoint.wait_for_owner)
            )
            snapshot = await begin_run(checkpoint)
        since: int | None = None
        if home is not None and checkpoint is not None and cursor is not None:
            since = await settle_cursor(home.runtime, checkpoint.run_id, cursor)
        run_id = checkpoint.run_id if checkpoint is not None else uuid.uuid4().hex
        if snapshot is not None:
            refuse_unstorable(snapshot)
        if snapshot is not None and snapshot.head.status == "completed":
            replayed = await _replay(
                agent, snapshot, history, session_id, request.emit, request.output
            )
            return replayed, None
        run = Run(
            runtime=request.runtime,
            entry_agent=agent,
            agent=agent,
            run_id=run_id,
            session_id=session_id,
            options=checkpoint,
            max_turns=request.max_turns,
            hooks=request.hooks or NO_HOOKS,
            emit=request.emit,
            context=request.context,
            history=history,
            stream=request.stream,
            output_override=request.output,
        )
        if home is None or since is None:
            result = await drive(run, snapshot, new_entries)
        else:
            result = await _drive_watched(run, snapshot, new_entries, home.runtime, since)
        waits = checkpoint is not None and checkpoint.wait_for_decisions
        if home is None or result.status != "awaiting_approval" or not waits:
            return result, None
        info = await home.runtime.stat(home.session_id)
        return result, 0 if info is None else info.head


async def _wait_for_decisions(checkpoint: CheckpointOptions, paused: RunResult, since: int) -> None:
    """Follow the run's checkpoint session (with the runtime's tail) from ``since`` until
    every pending call of ``paused`` has a decision, written by any process."""
    home = checkpoint.checkpointer.home(checkpoint.run_id)
    assert home is not None
    waiting = {c.call_id for c in paused.pending_approvals}
    async for event in home.runtime.tail(home.session_id, since_seq=since):
        if event.kind == APPROVAL_DECISION and isinstance(event.data, dict):
            waiting.discard(str(event.data.get("call_id")))
            if not waiting:
                return


async def _drive_watched(
    run: Run, snapshot: RunSnapshot | None, new_entries: list[Entry], runtime: Runtime, since: int
) -> RunResult:
    """:func:`drive`, following the run's stop requests meanwhile."""
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch_stops, runtime, run.run_id, since, run.request_stop)
            result = await drive(run, snapshot, new_entries)
            nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        error = unwrap_group(group)
        raise error from error.__cause__
    return result


async def _replay(
    agent: Agent,
    snapshot: RunSnapshot,
    history: History,
    session_id: str | None,
    emit: Callable[[RunEvent], Awaitable[None]],
    output: OutputSchema | None = None,
) -> RunResult:
    """A completed run: the stored output, the history append re-applied (it heals a
    segment missing after a crash or a failed history step), no model call."""
    name = snapshot.head.agent
    found = agent.find(name)
    if found is None:
        logger.warning(
            "replaying run %s: agent %r is unknown, reporting it as %r",
            snapshot.run_id,
            name,
            agent.name,
        )
        name, found = agent.name, agent
    if session_id is not None:
        state = snapshot.head.context_state
        meta: dict[str, JSON] | None = None if state is None else {"context_state": state}
        await history.append(session_id, snapshot.entries, run_id=snapshot.run_id, meta=meta)
    result = RunResult(
        snapshot.run_id,
        snapshot.head.output,
        snapshot.entries,
        Usage.from_json(snapshot.head.usage),
        name,
        None,
        _final_output(found, snapshot.head.output, output),
    )
    await emit(RunCompleted(result, replayed=True))
    return result


def _final_output(agent: Agent, stored: JSON, override: OutputSchema | None = None) -> Any:
    """The typed final output of a stored one (the run call's output type, else the
    agent's, if any)."""
    schema = override or agent.output
    if schema is None:
        return stored
    return schema.load(stored)
