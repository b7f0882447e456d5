"""What a store of runs shares with the file store, beyond the public protocol: stamping and
checking events, preparing them (redaction, large payloads set aside as blobs), the entries
that make one store re-enterable, and the events view a journal handle keeps.

``tether.postgres`` is built on it; nothing here is a promise to code outside tether.
"""

from __future__ import annotations

from ._blobs import SUMMARY_CHARS as SUMMARY_CHARS
from ._events import EventsView as EventsView
from ._inbox import still_queueing as still_queueing
from ._shared import SharedEntry as SharedEntry
from ._stamp import queueable as queueable
from ._stamp import stamp_events as stamp_events
from ._store import DEFAULT_BLOB_THRESHOLD as DEFAULT_BLOB_THRESHOLD
from ._store import prepare_event as prepare_event
