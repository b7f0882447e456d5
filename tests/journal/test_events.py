"""A handle's ``events``: one read-only view of the handle's own list, growing as appends land."""

from __future__ import annotations

import pathlib
from collections.abc import Sequence

import pytest

from tether.journal import AnyEvent, FileStore, Manifest, ModelResponse, RunStarted
from tether.journal._events import EventsView


def _started() -> RunStarted:
    return RunStarted(run_id="r", manifest=Manifest(model="m"), messages=[])


def _reply(n: int) -> ModelResponse:
    return ModelResponse(message={"role": "assistant", "content": f"answer {n}"})


async def test_events_is_one_view_that_grows_with_each_append(tmp_path: pathlib.Path) -> None:
    async with FileStore(tmp_path) as store, await store.create("r", [_started()]) as journal:
        view = journal.events
        assert journal.events is view  # no copy per access: a step's cost stays flat
        assert isinstance(view, Sequence)
        stamped = await journal.append([_reply(1), _reply(2)])
        assert len(view) == 3
        assert view[-2:] == stamped
        assert [e.seq for e in view] == [0, 1, 2]
        assert [e.seq for e in reversed(view)] == [2, 1, 0]
        assert stamped[0] in view
        assert view == await store.read("r")


async def test_events_cannot_be_changed_through_the_view(tmp_path: pathlib.Path) -> None:
    async with FileStore(tmp_path) as store, await store.create("r", [_started()]) as journal:
        view = journal.events
        with pytest.raises(TypeError):
            view[0] = _reply(0)  # type: ignore[index]
        with pytest.raises(AttributeError):
            view.append(_reply(0))  # type: ignore[attr-defined]
        sliced = view[:]
        sliced.append(_reply(0))  # a slice is a copy: the journal is untouched
        assert len(view) == 1
        with pytest.raises(TypeError):
            hash(view)


def test_a_view_is_equal_to_a_list_of_the_same_events_only() -> None:
    events: list[AnyEvent] = [_started()]
    view = EventsView(events)
    assert view == events
    assert events == view
    assert view == EventsView(list(events))
    assert view != tuple(events)
    assert view != []
    assert repr(view) == f"EventsView({events!r})"


def test_every_record_type_is_in_the_one_list() -> None:
    """``EVENT_TYPES`` is derived from ``AnyEvent``: every tagged record type defined in the
    vocabulary is in it, once, and ``tether.journal`` exports each of them."""
    from tether import journal
    from tether.journal import _records

    tagged = {
        cls
        for cls in vars(_records).values()
        if isinstance(cls, type)
        and issubclass(cls, _records.Event)
        and cls is not _records.Event
        and isinstance(cls.__struct_config__.tag, str)
    }
    assert set(_records.EVENT_TYPES) == tagged
    assert len(_records.EVENT_TYPES) == len(tagged)
    assert all(getattr(journal, cls.__name__) is cls for cls in tagged)
