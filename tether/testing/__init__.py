"""Tools for testing code built on tether.

``FaultyFileOps`` is a file layer that fails on purpose: pass it to ``FileStore(file_ops=...)``
to make a chosen ``pwrite``, ``fdatasync`` or other system call raise, write short, or run out
of space, and to count every call the store makes.
"""

from __future__ import annotations

from ._faults import FaultyFileOps as FaultyFileOps

__all__ = ["FaultyFileOps"]
