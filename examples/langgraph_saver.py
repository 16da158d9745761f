"""A LangGraph graph checkpointed by tidelog: pause at an interrupt, resume it, list
the thread's history and copy the thread (needs ``pip install 'tidelog[langgraph]'``).

Run it twice: the second run finds the first run's threads in ``graphs.db``.
"""

from __future__ import annotations

import asyncio
import operator
import uuid
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from runtime.integrations.langgraph import TidelogSaver


class State(TypedDict, total=False):
    steps: Annotated[list[str], operator.add]
    approved: bool


def plan(state: State) -> State:  # noqa: ARG001  (LangGraph passes the state)
    return {"steps": ["plan"]}


def approve(state: State) -> State:  # noqa: ARG001
    answer = interrupt({"question": "ship it?"})  # the run stops here, saved
    return {"steps": ["approve"], "approved": answer == "yes"}


def ship(state: State) -> State:
    return {"steps": ["ship" if state.get("approved") else "hold"]}


def build() -> StateGraph[Any]:
    builder: StateGraph[Any] = StateGraph(State)
    builder.add_node("plan", plan)
    builder.add_node("approve", approve)
    builder.add_node("ship", ship)
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "approve")
    builder.add_edge("approve", "ship")
    builder.add_edge("ship", END)
    return builder


def main() -> None:
    # The one line that differs from LangGraph's own savers: the tidelog runtime on
    # graphs.db (SQLite; a directory for JSONL, a postgresql:// URL) on its own thread.
    with TidelogSaver.from_target("graphs.db") as saver:
        graph = build().compile(checkpointer=saver)
        thread = f"order-{uuid.uuid4().hex[:6]}"
        config: Any = {"configurable": {"thread_id": thread}}
        saver.acquire(thread)  # this worker runs the thread (another would be refused)
        paused = graph.invoke({"steps": []}, config)
        print("paused:", paused["__interrupt__"][0].value)
        done = graph.invoke(Command(resume="yes"), config)
        print("steps:", done["steps"])
        print("checkpoints:", len(list(saver.list(config))))
        saver.copy_thread(thread, thread + "-copy")  # a tidelog fork: constant time
        copy: Any = {"configurable": {"thread_id": thread + "-copy"}}
        print("copy has the same state:", graph.get_state(copy).values == done)

        async def on_asyncio() -> Any:  # the same saver from an asyncio program
            config2: Any = {"configurable": {"thread_id": thread + "-async"}}
            await graph.ainvoke({"steps": []}, config2)
            return await graph.ainvoke(Command(resume="no"), config2)

        print("async steps:", asyncio.run(on_asyncio())["steps"])


if __name__ == "__main__":
    main()
