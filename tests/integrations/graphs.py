"""Small LangGraph graphs for the integration tests (imported by basename): each node
appends its name to ``log``, and records each call in ``calls`` (a list the test owns, or
a file in another process) so a test can tell what ran again on resume."""

from __future__ import annotations

import operator
import pathlib
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt


class State(TypedDict, total=False):
    log: Annotated[list[str], operator.add]
    answer: str


Record = Callable[[str], None]


def file_recorder(path: pathlib.Path) -> Record:
    """A recorder that appends each call to ``path`` (shared between processes)."""

    def record(name: str) -> None:
        with path.open("a") as out:
            out.write(name + "\n")

    return record


def recorded(path: pathlib.Path) -> list[str]:
    """The calls :func:`file_recorder` wrote."""
    return path.read_text().split() if path.exists() else []


def fan_out(
    record: Record,
    *,
    fail_once: set[str] | None = None,
    before_failing: Callable[[], None] | None = None,
) -> StateGraph[Any]:
    """start -> (left, right in parallel) -> join; a node named in ``fail_once`` raises
    the first time it runs, after ``before_failing()`` returned (LangGraph cancels the
    branches still running when one fails: a test that wants the sibling's result kept
    waits there until the saver has it)."""
    failing = set(fail_once or ())

    def node(name: str) -> Any:
        def run(state: State) -> State:  # noqa: ARG001  (the node protocol names it)
            record(name)
            if name in failing:
                failing.discard(name)
                if before_failing is not None:
                    before_failing()
                raise RuntimeError(f"{name} failed once")
            return {"log": [name]}

        return run

    builder: StateGraph[Any] = StateGraph(State)
    for name in ("start", "left", "right", "join"):
        builder.add_node(name, node(name))
    builder.add_edge(START, "start")
    builder.add_edge("start", "left")
    builder.add_edge("start", "right")
    builder.add_edge(["left", "right"], "join")
    builder.add_edge("join", END)
    return builder


def asking(record: Record) -> StateGraph[Any]:
    """start -> ask (interrupts for an answer) -> done."""

    def start(state: State) -> State:  # noqa: ARG001  (the node protocol names it)
        record("start")
        return {"log": ["start"]}

    def ask(state: State) -> State:  # noqa: ARG001  (the node protocol names it)
        record("ask")
        answer = interrupt({"question": "name?"})
        return {"log": ["ask"], "answer": str(answer)}

    def done(state: State) -> State:  # noqa: ARG001  (the node protocol names it)
        record("done")
        return {"log": ["done"]}

    builder: StateGraph[Any] = StateGraph(State)
    builder.add_node("start", start)
    builder.add_node("ask", ask)
    builder.add_node("done", done)
    builder.add_edge(START, "start")
    builder.add_edge("start", "ask")
    builder.add_edge("ask", "done")
    builder.add_edge("done", END)
    return builder


def chain(record: Record, *, slow: Callable[[], None] | None = None) -> StateGraph[Any]:
    """one -> two -> three; ``slow`` runs inside ``two`` (a test stops the process there)."""

    def node(name: str) -> Any:
        def run(state: State) -> State:  # noqa: ARG001  (the node protocol names it)
            record(name)
            if name == "two" and slow is not None:
                slow()
            return {"log": [name]}

        return run

    builder: StateGraph[Any] = StateGraph(State)
    for name in ("one", "two", "three"):
        builder.add_node(name, node(name))
    builder.add_edge(START, "one")
    builder.add_edge("one", "two")
    builder.add_edge("two", "three")
    builder.add_edge("three", END)
    return builder
