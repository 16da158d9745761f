"""tidelog under the agent frameworks people already use, as clients of the public
runtime API: ``runtime.integrations.langgraph`` (a LangGraph checkpoint saver, extra
``langgraph``) and ``runtime.integrations.openai_agents`` (an OpenAI Agents SDK
session, extra ``openai-agents``), both on a :class:`Bridge`: one tidelog runtime
serving asyncio, threads and trio alike. See ``docs/integrations.md``.
"""

from ._bridge import Bridge, open_bridge

__all__ = ["Bridge", "open_bridge"]

# Public names report their public home (``runtime.integrations.Bridge``).
for _name in __all__:
    _obj = globals()[_name]
    if getattr(_obj, "__module__", "").startswith(__name__ + "._"):
        _obj.__module__ = __name__
del _name, _obj
