"""``EventsView``: an open journal's events, read-only, without a copy.

A handle's ``events`` is read at every step of a run (to fold, to find a call's start), so it
must cost the same at step 5,000 as at step 5: a view over the handle's own list, made once
per handle, that grows as the handle appends. Only the handle changes the list.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import final, overload

from ._records import AnyEvent


@final
class EventsView(Sequence[AnyEvent]):
    """The events of a journal, oldest first, read-only: indexing, slicing (a list), ``len``,
    iteration. Equal to a list (or another view) of the same events."""

    __slots__ = ("_events",)

    def __init__(self, events: list[AnyEvent]) -> None:
        self._events = events

    @overload
    def __getitem__(self, index: int) -> AnyEvent: ...

    @overload
    def __getitem__(self, index: slice) -> list[AnyEvent]: ...

    def __getitem__(self, index: int | slice) -> AnyEvent | list[AnyEvent]:
        return self._events[index]

    def __len__(self) -> int:
        return len(self._events)

    def __iter__(self) -> Iterator[AnyEvent]:
        return iter(self._events)

    def __reversed__(self) -> Iterator[AnyEvent]:
        return reversed(self._events)

    def __contains__(self, value: object) -> bool:
        return value in self._events

    def __eq__(self, other: object) -> bool:
        if isinstance(other, EventsView):
            return self._events == other._events
        if isinstance(other, list):
            return self._events == other
        return NotImplemented

    def __repr__(self) -> str:
        return f"EventsView({self._events!r})"
