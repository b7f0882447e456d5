"""The journal: one append-only, checksummed, fsync'd file of events per run.

See ``_format`` for the byte layout, ``_records`` for the vocabulary and its evolution rules,
``_reader`` for how damage is classified and ``_writer`` for the durability contract.
"""

from __future__ import annotations

from ._blobs import BlobStore as BlobStore
from ._commit import GroupCommitter as GroupCommitter
from ._file import FileOps as FileOps
from ._format import FORMAT_VERSION as FORMAT_VERSION
from ._offline import RepairReport as RepairReport
from ._offline import repair_file as repair_file
from ._offline import verify_file as verify_file
from ._reader import Damage as Damage
from ._reader import Scan as Scan
from ._records import DEFAULT_MAX_MODEL_CALLS as DEFAULT_MAX_MODEL_CALLS
from ._records import SCHEMA_VERSION as SCHEMA_VERSION
from ._records import AnyEvent as AnyEvent
from ._records import BlobRef as BlobRef
from ._records import Budgets as Budgets
from ._records import ChildEnded as ChildEnded
from ._records import Decision as Decision
from ._records import Escalated as Escalated
from ._records import Event as Event
from ._records import Manifest as Manifest
from ._records import ModelFailed as ModelFailed
from ._records import ModelResponse as ModelResponse
from ._records import Parked as Parked
from ._records import Resolved as Resolved
from ._records import Resumed as Resumed
from ._records import Retried as Retried
from ._records import RunFinished as RunFinished
from ._records import RunStarted as RunStarted
from ._records import Signal as Signal
from ._records import Suspended as Suspended
from ._records import ToolFailed as ToolFailed
from ._records import ToolPin as ToolPin
from ._records import ToolResult as ToolResult
from ._records import ToolStarted as ToolStarted
from ._records import Usage as Usage
from ._records import Waiting as Waiting
from ._redact import Redactor as Redactor
from ._redact import SecretRedactor as SecretRedactor
from ._runid import check_run_id as check_run_id
from ._store import FileStore as FileStore
from ._store import RunJournal as RunJournal
from ._store import RunStat as RunStat
from ._store import Store as Store
from ._writer import Journal as Journal

__all__ = [
    "DEFAULT_MAX_MODEL_CALLS",
    "FORMAT_VERSION",
    "SCHEMA_VERSION",
    "AnyEvent",
    "BlobRef",
    "BlobStore",
    "Budgets",
    "ChildEnded",
    "Damage",
    "Decision",
    "Escalated",
    "Event",
    "FileOps",
    "FileStore",
    "GroupCommitter",
    "Journal",
    "Manifest",
    "ModelFailed",
    "ModelResponse",
    "Parked",
    "Redactor",
    "RepairReport",
    "Resolved",
    "Resumed",
    "Retried",
    "RunFinished",
    "RunJournal",
    "RunStarted",
    "RunStat",
    "Scan",
    "SecretRedactor",
    "Signal",
    "Store",
    "Suspended",
    "ToolFailed",
    "ToolPin",
    "ToolResult",
    "ToolStarted",
    "Usage",
    "Waiting",
    "check_run_id",
    "repair_file",
    "verify_file",
]
