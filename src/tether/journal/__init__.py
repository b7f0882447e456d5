"""The journal: one append-only, checksummed, fsync'd file of events per run.

See ``_format`` for the byte layout, ``_records`` for the vocabulary and its evolution rules,
``_reader`` for how damage is classified and ``_writer`` for the durability contract.

``FileStore`` keeps runs in a directory; each run open for writing is a ``FileJournal``. What
the runtime needs of any store is in ``_protocols``: ``Store`` (``RunStore``, ``Inbox`` and
``Blobs`` together) and ``JournalHandle``. The machinery underneath (the file layer, the group
committer, scans and their damage, the blob directory) is in ``tether.journal.lowlevel``.
"""

from __future__ import annotations

from .._public import publish as _publish
from . import lowlevel as lowlevel
from ._format import FORMAT_VERSION as FORMAT_VERSION
from ._format import MAX_RUN_ID_LEN as MAX_RUN_ID_LEN
from ._offline import RepairReport as RepairReport
from ._offline import repair_file as repair_file
from ._offline import verify_file as verify_file
from ._protocols import Blobs as Blobs
from ._protocols import Inbox as Inbox
from ._protocols import JournalHandle as JournalHandle
from ._protocols import RunStat as RunStat
from ._protocols import RunStore as RunStore
from ._protocols import Store as Store
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
from ._records import Repinned as Repinned
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
from ._writer import FileJournal as FileJournal

__all__ = [
    "DEFAULT_MAX_MODEL_CALLS",
    "FORMAT_VERSION",
    "MAX_RUN_ID_LEN",
    "SCHEMA_VERSION",
    "AnyEvent",
    "BlobRef",
    "Blobs",
    "Budgets",
    "ChildEnded",
    "Decision",
    "Escalated",
    "Event",
    "FileJournal",
    "FileStore",
    "Inbox",
    "JournalHandle",
    "Manifest",
    "ModelFailed",
    "ModelResponse",
    "Parked",
    "Redactor",
    "RepairReport",
    "Repinned",
    "Resolved",
    "Resumed",
    "Retried",
    "RunFinished",
    "RunStarted",
    "RunStat",
    "RunStore",
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

_publish(__name__, globals(), __all__)
