"""An OpenAI Agents SDK agent whose conversation lives in tidelog (needs
``pip install 'tidelog[openai-agents]'``).

The SDK's own scripted test model answers here, so the program runs offline; give the
Agent a real model (``model="gpt-4.1"``, with ``OPENAI_API_KEY`` set) and nothing else
changes.
"""

from __future__ import annotations

import asyncio
from typing import Any

from agents import Agent, RunConfig, Runner
from agents.testing import ScriptedModel, assistant_message

from runtime.integrations import Bridge
from runtime.integrations.openai_agents import TidelogSession


async def main() -> None:
    model = ScriptedModel([[assistant_message("Hello Ada.")], [assistant_message("Ada.")]])
    agent = Agent(name="helper", instructions="Be brief.", model=model)
    quiet = RunConfig(tracing_disabled=True)
    # One tidelog runtime (here a SQLite file) on its own thread serves every session.
    async with Bridge.start("sessions.db") as bridge:
        session = TidelogSession("chat-ada", bridge)
        await session.clear_session()  # start over on every run of the example
        first = await Runner.run(agent, "Hi, I am Ada.", session=session, run_config=quiet)
        print("assistant:", first.final_output)
        second = await Runner.run(agent, "What is my name?", session=session, run_config=quiet)
        print("assistant:", second.final_output)
        items = await session.get_items()
        print("items in the session:", len(items))
        print("the model saw the history:", len(model.calls[-1].input) == 3)
        last: Any = await session.pop_item()
        print("undo the last item:", last["role"])


if __name__ == "__main__":
    asyncio.run(main())
