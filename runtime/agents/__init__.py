"""tidelog's agent layer: agents, tools and models, the run loop with exact crash
recovery, conversation history, run checkpoints and the conversation projections.

Written only against the public session runtime (``runtime``): any program could build
the same on it.
"""

import importlib
from typing import TYPE_CHECKING

from ._agent import Agent
from ._approvals import (
    AlreadyDecidedError,
    ApprovalNotPendingError,
    Decision,
    approve,
    awaiting_approval,
    reject,
)
from ._array_log import (
    ArrayStoreLog,
    ArrayStoreUnsupportedError,
    ArrayWriteUnknownError,
    MessageArrayStore,
)
from ._checkpoints import (
    Checkpointer,
    CheckpointOptions,
    IfRunExists,
    RunHead,
    RunInfo,
    RunSnapshot,
    RunStatus,
    begin_run,
)
from ._checkpoints_memory import MemoryCheckpointer
from ._checkpoints_runtime import RuntimeCheckpointer
from ._closing import close_interrupted_run
from ._completion import complete_run
from ._context import (
    FACT_KIND,
    ContextProjection,
    FactsProjection,
    context_view,
    pinned_fact,
    verified_artifact,
)
from ._errors import (
    AgentNotFoundError,
    ForkPointError,
    MaxTurnsExceededError,
    ModelConnectionError,
    ModelError,
    ModelRateLimitError,
    ModelRequestError,
    ModelResponseError,
    ModelServerError,
    ModelTimeoutError,
    RunExistsError,
    RunNotFoundError,
    unwrap_group,
)
from ._events import (
    AwaitingApproval,
    Handoff,
    ModelTurn,
    RunCompleted,
    RunEvent,
    RunFailed,
    RunHooks,
    RunResult,
    RunStarted,
    RunStopped,
    ToolFinished,
    ToolStarted,
)
from ._fork import check_fork_point, fork_conversation
from ._handoffs import AgentHandoff
from ._history import History, Segment
from ._history_memory import MemoryHistory
from ._history_runtime import RuntimeHistory
from ._home import SessionHome
from ._models import (
    UNPARSED_ARGUMENTS,
    Model,
    ModelRequest,
    ModelResponse,
    ModelStreamEvent,
    RequestedCall,
    ScriptedModel,
    StreamingModel,
    StreamRestarted,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from ._output import OutputValidationError
from ._parts import FilePart, ImagePart, MessageTooLargeError, Part, TextPart
from ._projections import ConversationProjection, TurnsProjection, agent_projections
from ._provider import RetryPolicy
from ._raw_arguments import raw_arguments
from ._registry import checkpoints, history
from ._restore import Anchor, RestoreReport, checkpoint_anchors, restore_session
from ._retention import (
    CheckpointSession,
    PruneAction,
    PruneReport,
    checkpoint_sessions,
    control_sessions,
    conversation_sessions,
    delete_owned,
    prune,
)
from ._runner import Runner
from ._runs import RunOverview, list_runs
from ._sidecars import DEFAULT_SNAPSHOT_QUOTA, FILE_SNAPSHOT
from ._stopping import StopOutcome, request_stop
from ._tool_calls import TOOL_OUTCOME_UNKNOWN
from ._tools import (
    ApprovalPolicy,
    FunctionTool,
    RunContext,
    ToolArgumentsError,
    Verdict,
    function_tool,
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
from ._typed_output import OutputNotStorableError

if TYPE_CHECKING:  # imported lazily at run time (see __getattr__)
    from ._anthropic import AnthropicModel
    from ._openai import OpenAIChatModel
    from ._openai_responses import OpenAIResponsesModel

__all__ = [
    "DEFAULT_SNAPSHOT_QUOTA",
    "FACT_KIND",
    "FILE_SNAPSHOT",
    "TOOL_OUTCOME_UNKNOWN",
    "UNPARSED_ARGUMENTS",
    "Agent",
    "AgentHandoff",
    "AgentNotFoundError",
    "AlreadyDecidedError",
    "Anchor",
    "AnthropicModel",
    "ApprovalNotPendingError",
    "ApprovalPolicy",
    "ArrayStoreLog",
    "ArrayStoreUnsupportedError",
    "ArrayWriteUnknownError",
    "AssistantMessage",
    "AwaitingApproval",
    "CheckpointOptions",
    "CheckpointSession",
    "Checkpointer",
    "ContextProjection",
    "ConversationProjection",
    "Decision",
    "Entry",
    "FactsProjection",
    "FilePart",
    "ForkPointError",
    "FunctionTool",
    "Handoff",
    "History",
    "IfRunExists",
    "ImagePart",
    "MaxTurnsExceededError",
    "MemoryCheckpointer",
    "MemoryHistory",
    "MessageArrayStore",
    "MessageTooLargeError",
    "Model",
    "ModelConnectionError",
    "ModelError",
    "ModelRateLimitError",
    "ModelRequest",
    "ModelRequestError",
    "ModelResponse",
    "ModelResponseError",
    "ModelServerError",
    "ModelStreamEvent",
    "ModelTimeoutError",
    "ModelTurn",
    "OpenAIChatModel",
    "OpenAIResponsesModel",
    "OutputNotStorableError",
    "OutputValidationError",
    "Part",
    "PruneAction",
    "PruneReport",
    "RequestedCall",
    "RestoreReport",
    "RetryPolicy",
    "RunCompleted",
    "RunContext",
    "RunEvent",
    "RunExistsError",
    "RunFailed",
    "RunHead",
    "RunHooks",
    "RunInfo",
    "RunNotFoundError",
    "RunOverview",
    "RunResult",
    "RunSnapshot",
    "RunStarted",
    "RunStatus",
    "RunStopped",
    "Runner",
    "RuntimeCheckpointer",
    "RuntimeHistory",
    "ScriptedModel",
    "Segment",
    "SessionHome",
    "SidecarEntry",
    "StopOutcome",
    "StreamRestarted",
    "StreamingModel",
    "TextDelta",
    "TextPart",
    "ToolArgumentsError",
    "ToolCall",
    "ToolCallDelta",
    "ToolFinished",
    "ToolResult",
    "ToolStarted",
    "TurnsProjection",
    "Usage",
    "UserMessage",
    "Verdict",
    "agent_projections",
    "approve",
    "awaiting_approval",
    "begin_run",
    "check_fork_point",
    "checkpoint_anchors",
    "checkpoint_sessions",
    "checkpoints",
    "close_interrupted_run",
    "complete_run",
    "context_view",
    "control_sessions",
    "conversation_sessions",
    "delete_owned",
    "drop_dangling_tool_calls",
    "entry_from_json",
    "entry_to_json",
    "fork_conversation",
    "function_tool",
    "history",
    "list_runs",
    "pending_tool_calls",
    "pinned_fact",
    "prune",
    "raw_arguments",
    "reject",
    "request_stop",
    "restore_session",
    "unwrap_group",
    "verified_artifact",
]

#: The provider adapters, imported on first use: each needs its SDK (an optional extra).
_ADAPTERS = {
    "OpenAIChatModel": ("._openai", "openai"),
    "OpenAIResponsesModel": ("._openai_responses", "openai"),
    "AnthropicModel": ("._anthropic", "anthropic"),
}


def __getattr__(name: str) -> object:
    """Import a provider adapter when it is first asked for."""
    if name not in _ADAPTERS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module_name, extra = _ADAPTERS[name]
    try:
        module = importlib.import_module(module_name, __name__)
    except ImportError as exc:
        raise ImportError(
            f"{name} needs the {extra!r} SDK: pip install 'tidelog[{extra}]'"
        ) from exc
    adapter = getattr(module, name)
    adapter.__module__ = __name__
    globals()[name] = adapter
    return adapter


# Public names report their public home (``runtime.agents.Agent``, not ``..._agent``).
for _name in __all__:
    _obj = globals().get(_name)
    if getattr(_obj, "__module__", "").startswith(__name__ + "._"):
        _obj.__module__ = __name__
del _name, _obj
