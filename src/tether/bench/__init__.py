"""Journal throughput on the operator's disk: the measurement behind ``tether bench``.

``run(root, Settings.of(quick=True))`` writes durable records in ``root`` through tether's
journal and beside it through the baselines it is judged against (a plain ``os.write`` +
``fdatasync`` loop, a bare thread hand-off, aiofiles, SQLite in WAL mode with
``synchronous=FULL``), each case repeated in alternating order, and returns a ``Report``: the
median rate of every case, the ratios between them and the machine and filesystem it ran on.
A ratio, not a rate, is what carries from one machine to another: every case of one report
ran on the same disk within the same minutes.

``machine_info``, ``mount_of`` and ``scratch_dir`` are what every benchmark of the project
records and writes in, and ``SQLITE_EVENTS_SCHEMA`` with ``connect_sqlite_events`` the SQLite
design every one of them compares with, so they live here once.
"""

from __future__ import annotations

from .._errors import NoSuchCaseError as NoSuchCaseError
from .._public import publish as _publish
from ._cases import Case as Case
from ._cases import Ratio as Ratio
from ._cases import build_cases as build_cases
from ._cases import build_ratios as build_ratios
from ._cases import select_cases as select_cases
from ._machine import MEMORY_FILESYSTEMS as MEMORY_FILESYSTEMS
from ._machine import machine_info as machine_info
from ._machine import mount_of as mount_of
from ._machine import scratch_dir as scratch_dir
from ._report import Report as Report
from ._report import Result as Result
from ._run import Settings as Settings
from ._run import plan as plan
from ._run import run as run
from ._systems import SQLITE_EVENTS_SCHEMA as SQLITE_EVENTS_SCHEMA
from ._systems import connect_sqlite_events as connect_sqlite_events

__all__ = [
    "MEMORY_FILESYSTEMS",
    "SQLITE_EVENTS_SCHEMA",
    "Case",
    "NoSuchCaseError",
    "Ratio",
    "Report",
    "Result",
    "Settings",
    "build_cases",
    "build_ratios",
    "connect_sqlite_events",
    "machine_info",
    "mount_of",
    "plan",
    "run",
    "scratch_dir",
    "select_cases",
]

_publish(__name__, globals(), __all__)
