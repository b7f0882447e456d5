"""How many file descriptors a ``FileStore`` may have open at once: one budget, from
``RLIMIT_NOFILE``, that every open waits for instead of failing with ``EMFILE``.

Every descriptor the store opens is counted before it is opened, in one of two pools:

- a *journal* token for each journal held open (a run being advanced holds its journal, one
  descriptor, from ``open`` or ``create`` until ``aclose``);
- a *short* token for the length of one call that opens files and closes them again before it
  returns: a read, a listing of ``runs/``, a blob, an inbox, and the second file an open or a
  create may need (a torn tail kept aside, a directory synced). One short use has at most
  ``SHORT_FDS`` descriptors open at a time.

A caller that finds no token free waits for one; the wait is cancellable. So a burst of 2,000
``Supervisor.start`` calls under a limit of 256 descriptors queues for them, where it used to
fail with ``Too many open files``, and a run parked for a person still holds no descriptor.

The budget is the soft ``RLIMIT_NOFILE`` less a reserve for the rest of the process (the
interpreter, the event loop, the sockets of model clients, other libraries): a quarter of the
limit, at least ``MIN_RESERVE``. Of the budget, short uses get ``SHORT_FDS`` descriptors each
for at most ``SHORT_USES`` at once (fewer under a small limit), and journals the rest: under a
limit of 256, 192 descriptors, 16 short uses (48) and 144 journals; under 64, 48, 4 (12) and
36; under 1,024, 768, 16 (48) and 720.

Why two pools: a journal's holder may need a short use (a blob while it appends, its inbox),
never the reverse, and a short use waits for nothing while it holds its token; so both always
move on. A journal's holder that waits for a second journal (a run creating its child) moves on
as long as some journal tokens are not held by runs being advanced, which the supervisor keeps
so by advancing fewer runs at once than there are journal tokens (``max_active_runs``).

``EMFILE`` (or ``ENFILE``) can still happen when other code in the process took more than the
reserve. The store then waits, until one of its own descriptors is let go or for a while
(doubling from ``FIRST_WAIT`` up to ``MAX_WAIT``), and tries again, wherever trying again is
safe because nothing was done yet: opening and reading a journal, listing runs, creating one
(before it has a name), blobs, reading an inbox. It says so once per shortage, at WARNING.
"""

from __future__ import annotations

import errno
import logging
import resource
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TypeVar, final

import anyio

log = logging.getLogger("tether.journal")

MIN_RESERVE = 16
SHORT_FDS = 3
"""The most descriptors one short use has open at a time (an inbox being rewritten: the inbox,
its replacement, then its directory to sync)."""
SHORT_USES = 16
MIN_BUDGET = SHORT_FDS + 2
"""A short use and two journals: a run being advanced, and the child it may create."""
UNLIMITED = 1 << 16
"""What an unlimited ``RLIMIT_NOFILE`` counts as."""
FIRST_WAIT = 0.01
MAX_WAIT = 1.0
SHORTAGE = frozenset({errno.EMFILE, errno.ENFILE})

_T = TypeVar("_T")


def default_budget() -> int:
    """The descriptors a store may use: the soft ``RLIMIT_NOFILE`` less the process's reserve."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = UNLIMITED
    return max(MIN_BUDGET, soft - max(MIN_RESERVE, soft // 4))


def out_of_descriptors(exc: BaseException) -> bool:
    """Whether ``exc``, or what caused it, is an OS error saying no descriptor was free."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in SHORTAGE:
            return True
        code = getattr(seen, "errno", None)  # JournalIOError keeps the OS error's number
        if code in SHORTAGE:
            return True
        seen = seen.__cause__
    return False


@final
class Descriptors:
    """A store's descriptor budget (see the module's docstring).

    Args:
        budget: descriptors the store may have open at once; by default the soft
            ``RLIMIT_NOFILE`` less a quarter of it (at least 16 less).

    Raises:
        ValueError: ``budget`` is less than ``MIN_BUDGET``.
    """

    def __init__(self, budget: int | None = None) -> None:
        total = default_budget() if budget is None else budget
        if total < MIN_BUDGET:
            raise ValueError(f"a store needs at least {MIN_BUDGET} descriptors, not {total}")
        self.budget = total
        self.short_uses = max(1, min(SHORT_USES, total // (4 * SHORT_FDS)))
        self.journals = total - SHORT_FDS * self.short_uses
        """How many journals may be open at once."""
        self._journal_tokens = anyio.Semaphore(self.journals)
        self._short_tokens = anyio.Semaphore(self.short_uses)
        self._released: anyio.Event | None = None
        self._short_of: int = 0  # failed tries since descriptors last sufficed

    def start(self) -> None:
        """Begin afresh (a store entered): every token free, bound to the running loop."""
        self._journal_tokens = anyio.Semaphore(self.journals)
        self._short_tokens = anyio.Semaphore(self.short_uses)
        self._released = None

    @property
    def journals_open(self) -> int:
        """How many journal tokens are taken."""
        return self.journals - self._journal_tokens.value

    async def take_journal(self) -> None:
        """Wait for a journal token. On cancellation: nothing is taken."""
        await _acquire(self._journal_tokens)

    def give_journal(self) -> None:
        """Give back a journal token (its journal is closed)."""
        self._journal_tokens.release()
        self._tell()

    @asynccontextmanager
    async def short(self) -> AsyncIterator[None]:
        """Hold a short token for the block. On cancellation while waiting: nothing is held."""
        await _acquire(self._short_tokens)
        try:
            yield
        finally:
            self._short_tokens.release()
            self._tell()

    async def using(
        self, what: str, op: Callable[[], Awaitable[_T]], *, safe: Callable[[], bool] | None = None
    ) -> _T:
        """``op()`` under a short token, tried again while the process is out of descriptors.

        ``what`` names the operation in the log; ``safe``, asked after a failure, says whether
        trying again is safe (by default it always is: ``op`` did nothing before it failed).

        Raises:
            whatever ``op`` raises, except a shortage of descriptors when trying again is safe.

        On cancellation: stops waiting (for a token, or before the next try).
        """
        delay = FIRST_WAIT
        while True:
            await _acquire(self._short_tokens)
            short_of = False
            try:
                result = await op()
            except Exception as exc:
                if not out_of_descriptors(exc) or (safe is not None and not safe()):
                    raise
                short_of = True
                self._shortage(what, exc)
            else:
                self._sufficed()
                return result
            finally:
                self._short_tokens.release()
                if not short_of:  # a try that found no descriptor let none go either
                    self._tell()
            await self._wait_for_release(delay)
            delay = min(2 * delay, MAX_WAIT)

    def _shortage(self, what: str, exc: BaseException) -> None:
        self._short_of += 1
        if self._short_of == 1:
            soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            log.warning(
                "out of file descriptors to %s (%s; RLIMIT_NOFILE is %d, this store has %d of "
                "its %d journals open): something else in the process holds the rest; waiting "
                "for one to be released",
                what,
                exc,
                soft,
                self.journals_open,
                self.journals,
            )

    def _sufficed(self) -> None:
        if self._short_of:
            log.info("file descriptors are available again (%d tries waited)", self._short_of)
            self._short_of = 0

    async def _wait_for_release(self, delay: float) -> None:
        if self._released is None:
            self._released = anyio.Event()
        released = self._released
        with anyio.move_on_after(delay):
            await released.wait()

    def _tell(self) -> None:
        released, self._released = self._released, None
        if released is not None:
            released.set()


async def _acquire(tokens: anyio.Semaphore) -> None:
    """Take a token, without a trip through the event loop when one is free."""
    try:
        tokens.acquire_nowait()
    except anyio.WouldBlock:
        await tokens.acquire()
