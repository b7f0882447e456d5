"""An append (and a run's creation, with its first group) frames its events as given and
prepares them (redaction, the blob store) only when the group's bytes say it must: what lands
on disk is exactly what preparing every event first would have written.

The reference is the same store with the screen turned off (``screen_for`` giving ``None``:
every event redacted and sized before it is framed). Groups hold events with and without
secrets, small and large tool results, in any order, so a secret or a large result anywhere in
a group sends the whole group the careful way.
"""

from __future__ import annotations

import pathlib
from typing import Any

import anyio
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tether import SecretRedactor
from tether.journal import (
    AnyEvent,
    Budgets,
    Decision,
    Event,
    FileStore,
    Manifest,
    ModelResponse,
    RunStarted,
    ToolResult,
    _store,
)

from .test_redact_hints import SECRETS

THRESHOLD = 256

texts = st.text(alphabet="abc xyz-_", max_size=20)
strings = st.builds(
    lambda before, secret, after: before + secret + after,
    texts,
    st.sampled_from(["", "", "", *SECRETS]),
    texts,
)
large = st.builds(lambda s, n: s * n, strings, st.integers(min_value=1, max_value=40))
events: st.SearchStrategy[Event] = st.one_of(
    st.builds(lambda c: ToolResult(call_id="toolu_1", ok=True, content=c, at=1.0), strings),
    st.builds(lambda c: ToolResult(call_id="toolu_2", ok=True, content=c, at=2.0), large),
    st.builds(
        lambda t: ModelResponse(
            message={"role": "assistant", "content": [{"type": "text", "text": t}]}, at=3.0
        ),
        strings,
    ),
    st.builds(
        lambda n: Decision(call_id="toolu_3", approved=True, by="priya", note=n, at=4.0), strings
    ),
)
groups = st.lists(st.lists(events, min_size=1, max_size=4), min_size=1, max_size=4)
redactors = st.sampled_from(["default", "none", "own patterns", "a function"])


def redactor_of(kind: str) -> Any:
    if kind == "default":
        return SecretRedactor()
    if kind == "none":
        return None
    if kind == "own patterns":
        return SecretRedactor(extra=[r"xyz-_+"])
    return lambda event: event  # a redactor of one's own: nothing to tell from bytes


async def written(root: pathlib.Path, kind: str, appends: list[list[Event]]) -> list[AnyEvent]:
    async with FileStore(root, blob_threshold=THRESHOLD, redact=redactor_of(kind)) as store:
        first, *later = appends  # the first group is the run's creation's
        async with await store.create("r", list(first)) as journal:
            for group in later:
                await journal.append(list(group))
        return await store.read("r")  # a blob's reference names its content's digest


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(appends=groups, kind=redactors)
def test_a_screened_append_writes_what_preparing_each_event_writes(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    appends: list[list[Event]],
    kind: str,
) -> None:
    screened = anyio.run(written, tmp_path_factory.mktemp("screened"), kind, appends)
    with monkeypatch.context() as m:
        m.setattr(_store, "screen_for", lambda redact, threshold: None)
        prepared = anyio.run(written, tmp_path_factory.mktemp("prepared"), kind, appends)
    assert screened == prepared
    if kind in ("default", "own patterns"):
        for secret in SECRETS:
            assert secret not in repr(screened)


async def test_no_secret_reaches_the_disk_from_any_event_of_a_group(
    tmp_path: pathlib.Path,
) -> None:
    """One secret in the last event of a group: the group goes the careful way, and the raw
    journal holds no trace of it."""
    clean = [ToolResult(call_id=f"toolu_{i}", ok=True, content="fine") for i in range(3)]
    secret = ToolResult(call_id="toolu_9", ok=True, content=f"key {SECRETS[0]}")
    async with FileStore(tmp_path) as store, await store.create("r") as journal:
        stamped = await journal.append([*clean, secret])
    assert [e.seq for e in stamped] == [0, 1, 2, 3]
    raw = (tmp_path / "runs" / "r.journal").read_bytes()
    assert SECRETS[0].encode() not in raw
    assert b"key [REDACTED]" in raw


async def test_no_secret_reaches_the_disk_from_a_runs_first_events(tmp_path: pathlib.Path) -> None:
    """A run created with a secret in its prompt: its first group goes the careful way."""
    started = RunStarted(
        run_id="r",
        manifest=Manifest(model="m"),
        messages=[{"role": "user", "content": f"use {SECRETS[0]}"}],
        budgets=Budgets(),
    )
    async with FileStore(tmp_path) as store, await store.create("r", [started]):
        pass
    raw = (tmp_path / "runs" / "r.journal").read_bytes()
    assert SECRETS[0].encode() not in raw
    assert b"use [REDACTED]" in raw


def test_the_default_redactor_screens_and_one_with_patterns_of_its_own_does_not() -> None:
    assert SecretRedactor().screens
    assert not SecretRedactor(extra=["x+"]).screens
    assert _store.screen_for(SecretRedactor(extra=["x+"]), THRESHOLD) is None
    assert _store.screen_for(lambda e: e, THRESHOLD) is None
    screen = _store.screen_for(SecretRedactor(), THRESHOLD)
    assert screen is not None
    assert screen(b"nothing here", [12])
    assert not screen(b"a key sk-" + b"x" * 40, [50])
    assert not screen(b"a large one", [THRESHOLD + 1])


async def test_a_result_past_the_frame_limit_still_goes_to_the_blob_store(
    tmp_path: pathlib.Path,
) -> None:
    """Framed as given, a result larger than a frame may hold is no error: the careful way
    moves it to the blob store, as it always did."""
    from tether.journal._format import MAX_PAYLOAD

    content = "x" * (MAX_PAYLOAD + 1024)
    async with FileStore(tmp_path) as store, await store.create("r") as journal:
        [record] = await journal.append([ToolResult(call_id="toolu_1", ok=True, content=content)])
        assert isinstance(record, ToolResult)
        assert record.blob is not None
        assert await store.load_blob(record.blob) == content


async def test_an_event_that_cannot_be_encoded_is_refused_as_before(
    tmp_path: pathlib.Path,
) -> None:
    async with FileStore(tmp_path) as store, await store.create("r") as journal:
        with pytest.raises(TypeError):
            await journal.append([ToolResult(call_id="toolu_1", ok=True, content=object())])
        assert list(journal.events) == []


async def test_a_subclass_of_the_default_redactor_is_asked_for_every_event(
    tmp_path: pathlib.Path,
) -> None:
    """A ``SecretRedactor`` subclass may redact more than the default hints can tell: the
    screen leaves it to see every event."""

    class NoEmails(SecretRedactor):
        def __call__(self, event: Any) -> Any:
            event = super().__call__(event)
            if isinstance(event, ToolResult) and isinstance(event.content, str):
                content = event.content.replace("ana@example.com", "[EMAIL]")
                return msgspec.structs.replace(event, content=content)
            return event

    async with FileStore(tmp_path, redact=NoEmails()) as store, await store.create("r") as j:
        await j.append([ToolResult(call_id="toolu_1", ok=True, content="ana@example.com")])
    raw = (tmp_path / "runs" / "r.journal").read_bytes()
    assert b"ana@example.com" not in raw
    assert b"[EMAIL]" in raw
