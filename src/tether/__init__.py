"""tether: durable runs for long-running LLM agents.

An agent run writes every decision and every tool outcome to its own append-only journal
(length-prefixed, checksummed, fsync'd msgspec records) before acting on it, so a process killed
at any instant can be resumed without asking the model again and without repeating a side
effect.
"""

from __future__ import annotations

from importlib import import_module as _import_module
from typing import TYPE_CHECKING

from ._errors import BlobError as BlobError
from ._errors import InvalidRunIdError as InvalidRunIdError
from ._errors import JournalBrokenError as JournalBrokenError
from ._errors import JournalClosedError as JournalClosedError
from ._errors import JournalCorruptError as JournalCorruptError
from ._errors import JournalError as JournalError
from ._errors import JournalIOError as JournalIOError
from ._errors import JournalLockedError as JournalLockedError
from ._errors import JournalRemovedError as JournalRemovedError
from ._errors import JournalVersionError as JournalVersionError
from ._errors import LeaseLostError as LeaseLostError
from ._errors import ModelError as ModelError
from ._errors import ModelResponseError as ModelResponseError
from ._errors import OutcomeUnknownError as OutcomeUnknownError
from ._errors import RecordTooLargeError as RecordTooLargeError
from ._errors import RunExistsError as RunExistsError
from ._errors import RunNotFoundError as RunNotFoundError
from ._errors import RunRecordsError as RunRecordsError
from ._errors import RunStateError as RunStateError
from ._errors import StoreSchemaError as StoreSchemaError
from ._errors import StoreUnavailableError as StoreUnavailableError
from ._errors import TetherError as TetherError
from ._errors import ToolArgumentsError as ToolArgumentsError
from ._errors import ToolDefinitionError as ToolDefinitionError
from ._errors import ToolError as ToolError
from ._errors import ToolUnavailableError as ToolUnavailableError
from ._errors import UnknownToolError as UnknownToolError
from ._public import on_demand as _on_demand
from ._public import publish as _publish
from ._version import __version__ as __version__
from .journal import Budgets as Budgets
from .journal import FileJournal as FileJournal
from .journal import FileStore as FileStore
from .journal import JournalHandle as JournalHandle
from .journal import RunStat as RunStat
from .journal import SecretRedactor as SecretRedactor
from .journal import Store as Store

__all__ = [
    "AnthropicModel",
    "ApprovalTimeout",
    "BlobError",
    "Budgets",
    "ContentBlock",
    "ContentBlocks",
    "FileJournal",
    "FileStore",
    "InvalidRunIdError",
    "JournalBrokenError",
    "JournalClosedError",
    "JournalCorruptError",
    "JournalError",
    "JournalHandle",
    "JournalIOError",
    "JournalLockedError",
    "JournalRemovedError",
    "JournalVersionError",
    "LeaseLostError",
    "Message",
    "Model",
    "ModelError",
    "ModelReply",
    "ModelResponseError",
    "OpenAIModel",
    "OutcomeUnknownError",
    "PostgresStore",
    "RecordTooLargeError",
    "ReplayPolicy",
    "RunExistsError",
    "RunNotFoundError",
    "RunRecordsError",
    "RunStat",
    "RunStateError",
    "RunStatus",
    "RunView",
    "ScriptedModel",
    "SecretRedactor",
    "Store",
    "StoreSchemaError",
    "StoreUnavailableError",
    "Supervisor",
    "TetherError",
    "ToolArgumentsError",
    "ToolContext",
    "ToolDefinition",
    "ToolDefinitionError",
    "ToolError",
    "ToolRegistry",
    "ToolSpec",
    "ToolUnavailableError",
    "UnknownToolError",
    "Wait",
    "__version__",
    "sleep_for",
    "sleep_until",
    "start_child",
    "wait_for",
]

ON_DEMAND = {
    "AnthropicModel": "tether.models",
    "ContentBlock": "tether.models",
    "Message": "tether.models",
    "Model": "tether.models",
    "ModelReply": "tether.models",
    "OpenAIModel": "tether.models",
    "ScriptedModel": "tether.models",
    "ToolDefinition": "tether.models",
    "PostgresStore": "tether.postgres",
    "RunStatus": "tether.supervisor",
    "RunView": "tether.supervisor",
    "Supervisor": "tether.supervisor",
    "ApprovalTimeout": "tether.tools",
    "ContentBlocks": "tether.tools",
    "ReplayPolicy": "tether.tools",
    "ToolContext": "tether.tools",
    "ToolRegistry": "tether.tools",
    "ToolSpec": "tether.tools",
    "Wait": "tether.tools",
    "sleep_for": "tether.tools",
    "sleep_until": "tether.tools",
    "start_child": "tether.tools",
    "wait_for": "tether.tools",
}
"""Imported when first used: most programs use one model adapter, or none, and no database;
the supervisor comes with the first use of one of its names, the tools with the first tool.
What every command reads with (the errors, the journal and its stores) is imported with
``tether``; the command line's reading commands (``tether runs``, ``tether show``) never need
the tools or the models."""

SUBPACKAGES = frozenset({"models", "supervisor", "tools"})
"""Subpackages ``import tether`` no longer imports that were reachable as ``tether.<name>``
after it: imported on first use, as before."""

if TYPE_CHECKING:  # the names imported when first used, for type checkers
    from .models import AnthropicModel as AnthropicModel
    from .models import ContentBlock as ContentBlock
    from .models import Message as Message
    from .models import Model as Model
    from .models import ModelReply as ModelReply
    from .models import OpenAIModel as OpenAIModel
    from .models import ScriptedModel as ScriptedModel
    from .models import ToolDefinition as ToolDefinition
    from .postgres import PostgresStore as PostgresStore
    from .supervisor import RunStatus as RunStatus
    from .supervisor import RunView as RunView
    from .supervisor import Supervisor as Supervisor
    from .tools import ApprovalTimeout as ApprovalTimeout
    from .tools import ContentBlocks as ContentBlocks
    from .tools import ReplayPolicy as ReplayPolicy
    from .tools import ToolContext as ToolContext
    from .tools import ToolRegistry as ToolRegistry
    from .tools import ToolSpec as ToolSpec
    from .tools import Wait as Wait
    from .tools import sleep_for as sleep_for
    from .tools import sleep_until as sleep_until
    from .tools import start_child as start_child
    from .tools import wait_for as wait_for
else:

    def _subpackage(name: str) -> object:
        if name in SUBPACKAGES:
            return _import_module(f"{__name__}.{name}")
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

    __getattr__ = _on_demand(__name__, globals(), ON_DEMAND, _subpackage)


def __dir__() -> list[str]:
    return sorted({*globals(), *ON_DEMAND})


_publish(__name__, globals(), __all__)
