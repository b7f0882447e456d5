"""Appends through Linux ``io_uring``: a write and an ``fdatasync`` per batch, no writer thread.

With writer threads, every durable append costs two thread wake-ups (loop to thread, thread
to loop), and the threads contend with the event loop for the GIL. Here the event loop itself
queues a linked pair of requests per journal (``WRITE`` then ``FSYNC`` with
``IORING_FSYNC_DATASYNC``), submits every journal's pairs with one ``io_uring_enter`` per loop
iteration, and reaps the completions when the kernel signals an ``eventfd`` the loop watches.
The kernel's own workers do the blocking part.

Kept as with the threads (``_commit``): per journal, one batch in flight at a time, so writes
stay in ``seq`` order, and groups that arrive meanwhile ride the next batch; a failed write or
sync cuts the file back to its last durable end and poisons the journal, and every later group
fails without touching the disk.

A short write breaks the link (the kernel cancels the sync): the rest is written and synced by
a new pair. At most ``MAX_IN_FLIGHT`` pairs are out at once, few enough that the submission
queue always has room for them and no completion is ever dropped; journals beyond that wait in
turn.

The journal's ``FileOps`` is asked before each write and sync is queued (``submit_pwrite``,
``submit_fdatasync``), so a fault-injecting layer reaches this path as it reaches the threads:
a shortened write is sent alone (and finished as a short write is), and a refused request is
sent as a ``NOP`` in its place whose completion carries the refusal's ``errno``, so that an
injected failure comes back through the same completions, in the same order, as a real one.

Only used on x86-64 Linux: the shared ring indices and entries are read and written through a
``memoryview`` of the mapped rings (``struct`` packs a whole entry in one call) without
explicit barriers, which that architecture's ordering of plain loads and stores makes safe
(and nothing else here relies on). ``ctypes`` is only for the system calls (and imported
with the first ring, not with tether). Elsewhere, or where the kernel refuses a ring
(``kernel.io_uring_disabled``, seccomp, an old kernel), ``open_ring`` returns ``None`` and the
threads do the work.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import struct
import sys
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, final

from .._errors import JournalRemovedError
from ._target import CommitTarget, Pending

if TYPE_CHECKING:
    import asyncio

_SYS_SETUP, _SYS_ENTER, _SYS_REGISTER = 425, 426, 427
_OP_NOP, _OP_FSYNC, _OP_WRITE = 0, 3, 23
_IOSQE_IO_LINK = 1 << 2
_FSYNC_DATASYNC = 1
_REGISTER_EVENTFD = 4
_REGISTER_IOWQ_MAX_WORKERS = 19
_OFF_SQES = 0x10000000
_FEAT_SINGLE_MMAP, _FEAT_NODROP, _FEAT_SUBMIT_STABLE, _FEAT_RW_CUR_POS = 1, 2, 4, 8
_NEEDED = _FEAT_SINGLE_MMAP | _FEAT_NODROP | _FEAT_SUBMIT_STABLE | _FEAT_RW_CUR_POS
"""Linux 5.6 and later: ``IORING_OP_WRITE`` exists from 5.6, as ``RW_CUR_POS`` does."""
_U32 = 0xFFFFFFFF

ENTRIES = 256
MAX_IN_FLIGHT = 120
"""Write+sync pairs sent at once: their 240 requests always fit the submission queue (256),
even before any is submitted, and their completions the completion queue (512)."""


# struct io_uring_params: 10 u32, then the offsets of the submission ring (7 u32, a reserved
# u32, a u64) and of the completion ring (the same shape).
_PARAMS = struct.Struct("<10I" + "8IQ" + "8IQ")
_SQE = struct.Struct("<BBHiQQIIQ24x")
"""One submission entry (64 bytes): opcode, flags, ioprio, fd, off, addr, len, op_flags,
user_data, and the rest zero."""
_CQE = struct.Struct("<QiI")
"""One completion entry (16 bytes): user_data, res, flags."""


_Batch = list[Pending]
Deliver = Callable[[CommitTarget, _Batch, BaseException | None], None]


@final
class _Pair:
    """One write+sync pair in the kernel, for one batch of one journal."""

    __slots__ = (
        "batch",
        "buf",
        "end",
        "fres",
        "new_alloc",
        "offset",
        "sync_fault",
        "target",
        "unlinked",
        "untaken",
        "wres",
        "write_fault",
    )

    def __init__(
        self, target: CommitTarget, batch: _Batch, buf: bytes, offset: int, end: int, new_alloc: int
    ) -> None:
        self.target = target
        self.batch = batch
        self.buf = buf  # kept alive until both completions are in
        self.offset = offset
        self.end = end  # of the data; ``buf`` may go on with preallocation zeros
        self.new_alloc = new_alloc
        self.wres: int | None = None
        self.fres: int | None = None
        self.unlinked = False  # its write and sync went to the kernel in different submits
        self.untaken = 0  # of its requests (one or two), how many the kernel has not taken yet
        self.write_fault: OSError | None = None  # refused by ``FileOps``: a NOP went instead
        self.sync_fault: OSError | None = None


def _check(result: int, what: str) -> int:
    if result < 0:
        import ctypes

        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")
    return result


@final
class Ring:
    """An ``io_uring`` instance driven from the event loop. Create with ``open_ring``."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        deliver: Deliver,
        workers: int,
        *,
        max_in_flight: int = MAX_IN_FLIGHT,
    ) -> None:
        if not 1 <= max_in_flight <= MAX_IN_FLIGHT:
            raise ValueError(f"max_in_flight must be between 1 and {MAX_IN_FLIGHT}")
        import ctypes  # with the first ring: tether's import does not load it

        self._libc = ctypes.CDLL(None, use_errno=True)
        self._libc.syscall.restype = ctypes.c_long
        self._get_errno = ctypes.get_errno
        self._address = _address_of_bytes(ctypes)
        raw = bytearray(_PARAMS.size)
        params_ref = (ctypes.c_char * len(raw)).from_buffer(raw)
        self.fd = _check(
            self._libc.syscall(_SYS_SETUP, ENTRIES, ctypes.byref(params_ref)), "io_uring_setup"
        )
        del params_ref  # the buffer is free again
        try:
            self._map(_Params(_PARAMS.unpack(raw)))
            self._efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
            efd = ctypes.c_int(self._efd)
            _check(
                self._libc.syscall(_SYS_REGISTER, self.fd, _REGISTER_EVENTFD, ctypes.byref(efd), 1),
                "io_uring_register(eventfd)",
            )
            # The kernel's workers do the syncs; by default it allows 4 per CPU at once.
            limits = (ctypes.c_uint32 * 2)(workers, 0)
            with contextlib.suppress(OSError):  # older kernels: keep their default
                _check(
                    self._libc.syscall(
                        _SYS_REGISTER, self.fd, _REGISTER_IOWQ_MAX_WORKERS, limits, 2
                    ),
                    "io_uring_register(max workers)",
                )
        except BaseException:
            self._unmap()
            raise
        self._loop = loop
        self._deliver = deliver
        self._max_in_flight = max_in_flight
        self._pairs: dict[int, _Pair] = {}
        self._next_id = 1
        self._waiting: deque[CommitTarget] = deque()
        self._unsubmitted = 0
        self._queued: deque[_Pair] = deque()  # pairs not wholly taken by the kernel yet
        self._flush_scheduled = False
        self._closed = False
        self._drained: asyncio.Future[None] | None = None
        self._broken: OSError | None = None
        self.syncs = 0
        loop.add_reader(self._efd, self._reap)

    def _map(self, p: _Params) -> None:
        self._sq_map: mmap.mmap | None = None
        self._sqe_map: mmap.mmap | None = None
        self._efd = -1
        if p.features & _NEEDED != _NEEDED:
            raise OSError(errno.ENOSYS, "io_uring older than Linux 5.6")
        size = max(p.sq_array + p.sq_entries * 4, p.cq_cqes + p.cq_entries * 16)
        prot, flags = mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED | mmap.MAP_POPULATE
        self._sq_map = mmap.mmap(self.fd, size, flags, prot, offset=0)
        self._sqe_map = mmap.mmap(self.fd, p.sq_entries * 64, flags, prot, offset=_OFF_SQES)
        self._rings = memoryview(self._sq_map)  # both rings: one mapping (FEAT_SINGLE_MMAP)
        self._u32 = self._rings.cast("I")
        self._sqes = memoryview(self._sqe_map)
        self._sq_tail_at = p.sq_tail // 4
        self._sq_mask = self._u32[p.sq_ring_mask // 4]
        self._sq_array_at = p.sq_array // 4
        self._cq_head_at, self._cq_tail_at = p.cq_head // 4, p.cq_tail // 4
        self._cq_mask = self._u32[p.cq_ring_mask // 4]
        self._cqes_at = p.cq_cqes

    def _unmap(self) -> None:
        for name in ("_u32", "_rings", "_sqes"):
            view = getattr(self, name, None)
            if view is not None:
                view.release()  # the views must go before their mappings close
                delattr(self, name)
        try:
            for m in (getattr(self, "_sqe_map", None), getattr(self, "_sq_map", None)):
                if m is not None:
                    m.close()
        finally:
            if getattr(self, "_efd", -1) >= 0:
                os.close(self._efd)
                self._efd = -1
            os.close(self.fd)

    # --- the loop side ---------------------------------------------------------------------

    def start(self, target: CommitTarget) -> None:
        """Send ``target``'s pending groups to the kernel (or queue it while the ring is full).

        The caller has set ``target.scheduled``; it stays set until the journal has nothing
        pending and nothing in flight.
        """
        error = target.failed or self._broken
        if error is None and len(self._pairs) >= self._max_in_flight:
            self._waiting.append(target)
            return
        batch, target.pending = target.pending, []
        if error is None:
            try:
                target.check_named()
            except (JournalRemovedError, OSError) as exc:
                error = target.failed = exc
        if error is not None:  # poisoned: fail without touching the disk
            self._finish(target, batch, error)
            return
        data = batch[0][0] if len(batch) == 1 else b"".join(g for g, _, _ in batch)
        buf, offset, new_alloc = target.plan_write(data)
        self._send(_Pair(target, batch, buf, offset, offset + len(data), new_alloc))

    def _send(self, pair: _Pair) -> None:
        """Queue a write of ``pair.buf`` at ``pair.offset``, linked to a sync of the file, as
        the journal's ``FileOps`` allows: a write it shortens goes alone (no sync: the rest
        follows, as after a short write), and a request it refuses goes as a ``NOP``."""
        pid = self._next_id
        self._next_id += 1
        self._pairs[pid] = pair
        pair.wres = pair.fres = None
        fd, ops, size = pair.target.fd, pair.target.ops, len(pair.buf)
        try:
            length = ops.submit_pwrite(fd, size, pair.offset)
        except OSError as exc:
            length, pair.write_fault = 0, exc
        whole = pair.write_fault is None and length >= size
        if whole and pair.sync_fault is None:
            try:
                ops.submit_fdatasync(fd)
            except OSError as exc:
                pair.sync_fault = exc
        if pair.write_fault is not None:
            self._push(_OP_NOP, -1, 0, pid << 1, 0, 0, 0, 0)
        else:
            addr = self._address(pair.buf)
            link = _IOSQE_IO_LINK if whole else 0
            self._push(_OP_WRITE, fd, link, pid << 1, pair.offset, addr, min(length, size), 0)
        if whole:
            pair.untaken = 2
            if pair.sync_fault is None:
                self._push(_OP_FSYNC, fd, 0, (pid << 1) | 1, 0, 0, 0, _FSYNC_DATASYNC)
            else:  # the write runs; the kernel cancels the NOP too if the write falls short
                self._push(_OP_NOP, -1, 0, (pid << 1) | 1, 0, 0, 0, 0)
        else:
            pair.untaken = 1
            pair.fres = -errno.ECANCELED  # no sync asked for: as if the kernel cancelled it
        self._queued.append(pair)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _push(
        self,
        opcode: int,
        fd: int,
        flags: int,
        user_data: int,
        off: int,
        addr: int,
        length: int,
        op_flags: int,
    ) -> None:
        u32 = self._u32
        tail = u32[self._sq_tail_at]
        index = tail & self._sq_mask
        _SQE.pack_into(
            self._sqes, index * 64, opcode, flags, 0, fd, off, addr, length, op_flags, user_data
        )
        u32[self._sq_array_at + index] = index
        u32[self._sq_tail_at] = (tail + 1) & _U32  # a plain store, after the SQE's on x86-64
        self._unsubmitted += 1

    def _flush(self) -> None:
        self._flush_scheduled = False
        self._submit()

    def _submit(self) -> None:
        while self._unsubmitted and self._broken is None:
            n = self._libc.syscall(_SYS_ENTER, self.fd, self._unsubmitted, 0, 0, None, 0)
            if n > 0:
                self._unsubmitted -= n
                self._taken(n)
                continue
            code = self._get_errno() if n < 0 else errno.EAGAIN
            if code == errno.EINTR:
                continue
            if code in (errno.EAGAIN, errno.EBUSY):  # kernel short of memory or CQ space
                if not self._flush_scheduled:
                    self._flush_scheduled = True
                    self._loop.call_later(0.001, self._flush)
                return
            self._fail_everything(OSError(code, f"io_uring_enter: {os.strerror(code)}"))
            return

    def _taken(self, n: int) -> None:
        """Account for ``n`` requests the kernel took, oldest first (a pair's write, then its
        sync). A pair split between two submits had its write run unlinked: its sync may have
        finished first, so its completion does not count (``_settle`` sends it again)."""
        while n:
            pair = self._queued[0]
            took = min(n, pair.untaken)
            pair.untaken -= took
            n -= took
            if pair.untaken:  # its write went, its sync waits for the next submit
                pair.unlinked = True
                return
            self._queued.popleft()

    def _reap(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.eventfd_read(self._efd)
        u32, rings, cqes_at, mask = self._u32, self._rings, self._cqes_at, self._cq_mask
        try:
            for head in cq_indices(u32[self._cq_head_at], u32[self._cq_tail_at]):
                user_data, res, _ = _CQE.unpack_from(rings, cqes_at + (head & mask) * 16)
                u32[self._cq_head_at] = (head + 1) & _U32  # hand the slot back before acting
                pair = self._pairs.get(user_data >> 1)
                if pair is None:
                    continue
                if user_data & 1:
                    pair.fres = _result(res, pair.sync_fault)
                else:
                    pair.wres = _result(res, pair.write_fault)
                if pair.wres is not None and pair.fres is not None:
                    del self._pairs[user_data >> 1]
                    self._settle(pair)
            while self._waiting and len(self._pairs) < self._max_in_flight:
                self.start(self._waiting.popleft())
        finally:
            if not self._closed and u32[self._cq_head_at] != u32[self._cq_tail_at]:
                os.eventfd_write(self._efd, 1)  # interrupted: come back for the rest
        if not self._pairs and self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    def _settle(self, pair: _Pair) -> None:
        wres, fres = pair.wres or 0, pair.fres or 0
        if wres < 0:
            self._finish(pair.target, pair.batch, pair.write_fault or _os_error(-wres, "write"))
            return
        if fres < 0 and fres != -errno.ECANCELED:  # a sync that ran and failed: never again
            self._finish(pair.target, pair.batch, pair.sync_fault or _os_error(-fres, "fdatasync"))
            return
        if wres < len(pair.buf) or pair.unlinked:
            # Short (the kernel cancelled the linked sync): write the rest and sync. Unlinked:
            # the same bytes again, to the same place, with a sync linked to them.
            if wres == 0 and not pair.unlinked:
                self._finish(pair.target, pair.batch, _os_error(errno.EIO, "write"))
                return
            if self._broken is not None:
                self._finish(pair.target, pair.batch, self._broken)
                return
            if not pair.unlinked:
                pair.buf = pair.buf[wres:]
                pair.offset += wres
            pair.unlinked = False
            self._send(pair)
            return
        if fres < 0:
            self._finish(pair.target, pair.batch, pair.sync_fault or _os_error(-fres, "fdatasync"))
            return
        self.syncs += 1
        pair.target.written(pair.end, pair.new_alloc)
        self._finish(pair.target, pair.batch, None)

    def _finish(self, target: CommitTarget, batch: _Batch, error: BaseException | None) -> None:
        if error is not None and target.failed is None:
            # The journal's one batch in flight has ended, so nothing more of it can land:
            # cut off whatever part reached the file (a blocking ftruncate, on this rare path).
            target.cut_back()
            target.failed = error
        self._deliver(target, batch, error)
        if not target.pending:
            target.scheduled = False
        elif self._waiting and self._broken is None:
            self._waiting.append(target)  # take turns with the journals waiting for a slot
        else:
            self.start(target)

    def _fail_everything(self, error: OSError) -> None:
        """The ring itself failed: every batch the kernel has not taken fails, and every later
        one. Pairs it has taken stay until their completions arrive (their buffers with them),
        and end as their results say; a write whose sync it never took fails."""
        self._broken = error
        if self._queued and self._queued[0].unlinked:  # its write is in; its sync never will be
            self._queued[0].fres = -errno.ECANCELED
            self._queued.popleft()
        unsent = [pair for pair in self._queued]
        self._queued.clear()
        for pair in unsent:
            for pid, held in list(self._pairs.items()):
                if held is pair:
                    del self._pairs[pid]
            self._finish(pair.target, pair.batch, error)
        while self._waiting:
            self.start(self._waiting.popleft())
        if not self._pairs and self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    async def aclose(self) -> None:
        """Wait for every pair in the kernel, then release the ring. Idempotent."""
        if self._closed:
            return
        if self._pairs or self._waiting:
            import asyncio

            self._drained = self._loop.create_future()
            await asyncio.shield(self._drained)
        self._closed = True
        self._loop.remove_reader(self._efd)
        self._unmap()


def cq_indices(head: int, tail: int) -> Iterator[int]:
    """The completion queue's indices from ``head`` up to ``tail``, which the kernel's 32-bit
    counters can have wrapped past (``tail`` below ``head``)."""
    while head != tail:
        yield head
        head = (head + 1) & _U32


def _result(res: int, fault: OSError | None) -> int:
    """A completion's result: the kernel's, or for a ``NOP`` sent in place of a request that
    ``FileOps`` refused, the refusal's ``errno`` (unless the kernel cancelled the ``NOP``)."""
    if fault is None or res < 0:
        return res
    return -(fault.errno or errno.EIO)


@final
class _Params:
    """The fields of ``struct io_uring_params`` this module reads, by their kernel names."""

    def __init__(self, fields: tuple[int, ...]) -> None:
        self.sq_entries, self.cq_entries = fields[0], fields[1]
        self.features = fields[5]
        sq, cq = fields[10:19], fields[19:28]
        self.sq_tail, self.sq_ring_mask, self.sq_array = sq[1], sq[2], sq[6]
        self.cq_head, self.cq_tail, self.cq_ring_mask, self.cq_cqes = cq[0], cq[1], cq[2], cq[5]


def _address_of_bytes(ctypes: Any) -> Callable[[bytes], int]:
    """How to find where a ``bytes`` object's data lies, for a write's ``addr``.

    In CPython a ``bytes`` object's data starts at a fixed offset from the object, whose
    address is its ``id``: that offset, checked through ``ctypes`` on two objects, saves a
    ``ctypes`` cast (a couple of µs) per write. Elsewhere, the cast.
    """

    def cast(data: bytes) -> int:
        return ctypes.cast(data, ctypes.c_void_p).value or 0

    probes = (b"tether", bytes(100))
    offset = cast(probes[0]) - id(probes[0])
    if sys.implementation.name != "cpython" or any(cast(p) - id(p) != offset for p in probes):
        return cast
    return lambda data: id(data) + offset


def _os_error(code: int, what: str) -> OSError:
    return OSError(code, f"{os.strerror(code)} (io_uring {what})")


def open_ring(deliver: Deliver, workers: int, *, max_in_flight: int = MAX_IN_FLIGHT) -> Ring | None:
    """A ring bound to the running loop, or ``None`` where ``io_uring`` cannot be used.

    ``deliver`` is told each batch's outcome on the loop; at most ``workers`` kernel workers
    sync at once, and at most ``max_in_flight`` write+sync pairs are out (``MAX_IN_FLIGHT``
    at most).
    """
    if sys.platform != "linux" or os.uname().machine not in ("x86_64", "AMD64"):
        return None
    if os.environ.get("TETHER_IO_URING", "1") == "0":
        return None
    import asyncio

    try:
        return Ring(asyncio.get_running_loop(), deliver, workers, max_in_flight=max_in_flight)
    except OSError:
        return None
