"""tidelog's agent layer: agents, tools and models, the run loop with exact crash
recovery, conversation history, run checkpoints and the conversation projections.

Written only against the public session runtime (``runtime``): any program could build
the same on it.
"""

from ._agent import (
    Agent,
    FunctionTool,
    Model,
    ModelRequest,
    ModelResponse,
    RequestedCall,
    RunContext,
    ScriptedModel,
    Usage,
    function_tool,
)
from ._checkpoints import (
    Checkpointer,
    CheckpointOptions,
    MemoryCheckpointer,
    RunHead,
    RunInfo,
    RunSnapshot,
    RunStatus,
    RuntimeCheckpointer,
    begin_run,
)
from ._completion import complete_run
from ._errors import (
    AgentNotFoundError,
    ForkPointError,
    MaxTurnsExceededError,
    RunExistsError,
    RunNotFoundError,
)
from ._fork import check_fork_point, fork_conversation
from ._history import History, MemoryHistory, RuntimeHistory, Segment
from ._projections import ConversationProjection, TurnsProjection, agent_projections
from ._registry import checkpoints, history
from ._retention import (
    CheckpointSession,
    PruneAction,
    PruneReport,
    checkpoint_sessions,
    conversation_sessions,
    prune,
)
from ._runner import (
    TOOL_OUTCOME_UNKNOWN,
    Handoff,
    ModelTurn,
    RunCompleted,
    RunEvent,
    RunFailed,
    RunHooks,
    Runner,
    RunResult,
    RunStarted,
    ToolFinished,
    ToolStarted,
)
from ._transcript import (
    AssistantMessage,
    Entry,
    SidecarEntry,
    ToolCall,
    ToolResult,
    UserMessage,
    drop_dangling_tool_calls,
    entry_from_json,
    entry_to_json,
    pending_tool_calls,
)

__all__ = [
    "TOOL_OUTCOME_UNKNOWN",
    "Agent",
    "AgentNotFoundError",
    "AssistantMessage",
    "CheckpointOptions",
    "CheckpointSession",
    "Checkpointer",
    "ConversationProjection",
    "Entry",
    "ForkPointError",
    "FunctionTool",
    "Handoff",
    "History",
    "MaxTurnsExceededError",
    "MemoryCheckpointer",
    "MemoryHistory",
    "Model",
    "ModelRequest",
    "ModelResponse",
    "ModelTurn",
    "PruneAction",
    "PruneReport",
    "RequestedCall",
    "RunCompleted",
    "RunContext",
    "RunEvent",
    "RunExistsError",
    "RunFailed",
    "RunHead",
    "RunHooks",
    "RunInfo",
    "RunNotFoundError",
    "RunResult",
    "RunSnapshot",
    "RunStarted",
    "RunStatus",
    "Runner",
    "RuntimeCheckpointer",
    "RuntimeHistory",
    "ScriptedModel",
    "Segment",
    "SidecarEntry",
    "ToolCall",
    "ToolFinished",
    "ToolResult",
    "ToolStarted",
    "TurnsProjection",
    "Usage",
    "UserMessage",
    "agent_projections",
    "begin_run",
    "check_fork_point",
    "checkpoint_sessions",
    "checkpoints",
    "complete_run",
    "conversation_sessions",
    "drop_dangling_tool_calls",
    "entry_from_json",
    "entry_to_json",
    "fork_conversation",
    "function_tool",
    "history",
    "pending_tool_calls",
    "prune",
]

# Public names report their public home (``runtime.agents.Agent``, not ``..._agent``).
for _name in __all__:
    _obj = globals()[_name]
    if getattr(_obj, "__module__", "").startswith(__name__ + "._"):
        _obj.__module__ = __name__
del _name, _obj
