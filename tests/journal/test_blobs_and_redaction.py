"""Large tool results go to the blob store; secrets never reach the disk."""

from __future__ import annotations

import errno
import hashlib
import os
import pathlib
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest

from tether import BlobError, SecretRedactor
from tether.journal import (
    BlobRef,
    Decision,
    Event,
    FileStore,
    Manifest,
    ModelResponse,
    Resolved,
    RunStarted,
    ToolResult,
)
from tether.testing import FaultyFileOps

THRESHOLD = 256

BIG_DICT: dict[str, Any] = {"rows": [{"n": i, "name": f"row {i}"} for i in range(100)]}
BIG_TEXT = "line of tool output\n" * 200


def started(run_id: str = "r") -> RunStarted:
    return RunStarted(
        run_id=run_id, manifest=Manifest(model="test-model"), messages=[{"role": "user"}]
    )


def encoded(content: Any) -> bytes:
    return msgspec.msgpack.encode(content)


@pytest.fixture
async def store(tmp_path: pathlib.Path) -> AsyncIterator[FileStore]:
    async with FileStore(tmp_path, blob_threshold=THRESHOLD) as s:
        yield s


def blob_files(root: pathlib.Path) -> list[pathlib.Path]:
    return sorted(p for p in (root / "blobs").rglob("*") if p.is_file())


# --- blobs -------------------------------------------------------------------------------------


@pytest.mark.parametrize("content", [BIG_DICT, BIG_TEXT], ids=["dict", "str"])
async def test_large_result_goes_to_the_blob_store(
    store: FileStore, tmp_path: pathlib.Path, content: Any
) -> None:
    data = encoded(content)
    assert len(data) > THRESHOLD
    async with await store.create("r", [started()]) as journal:
        [record] = await journal.append([ToolResult(call_id="c1", ok=True, content=content)])

    assert isinstance(record, ToolResult)
    assert record.content is None
    assert record.blob is not None
    digest = hashlib.sha256(data).hexdigest()
    assert record.blob.digest == digest
    assert record.blob.size == len(data)
    text = content if isinstance(content, str) else msgspec.json.encode(content).decode()
    assert record.blob.summary == text[:200]

    [_, on_disk] = await store.read("r")
    assert on_disk == record
    assert await store.load_blob(record.blob) == content
    path = tmp_path / "blobs" / digest[:2] / digest
    assert blob_files(tmp_path) == [path]
    assert path.read_bytes() == data
    assert data not in (tmp_path / "runs" / "r.journal").read_bytes()


async def test_identical_content_is_stored_once(store: FileStore, tmp_path: pathlib.Path) -> None:
    async with await store.create("r") as journal:
        results = await journal.append(
            [ToolResult(call_id=f"c{i}", ok=True, content=BIG_DICT) for i in range(3)]
        )
        results += await journal.append([ToolResult(call_id="c9", ok=True, content=BIG_DICT)])
    refs = [r.blob for r in results if isinstance(r, ToolResult)]
    assert len(refs) == 4
    assert all(ref is not None for ref in refs)
    assert len({ref.digest for ref in refs if ref is not None}) == 1
    assert len(store.blobs.digests()) == 1
    assert len(blob_files(tmp_path)) == 1  # no temporary files either


async def test_blob_survives_reopening_the_store(tmp_path: pathlib.Path) -> None:
    async with FileStore(tmp_path, blob_threshold=THRESHOLD) as store:
        await (
            await store.create("r", [ToolResult(call_id="c1", ok=True, content=BIG_TEXT)])
        ).aclose()
    async with FileStore(tmp_path, blob_threshold=THRESHOLD) as store:
        [record] = await store.read("r")
        assert isinstance(record, ToolResult)
        assert record.blob is not None
        assert await store.load_blob(record.blob) == BIG_TEXT


async def _stored_ref(store: FileStore) -> BlobRef:
    async with await store.create("r") as journal:
        [record] = await journal.append([ToolResult(call_id="c1", ok=True, content=BIG_TEXT)])
    assert isinstance(record, ToolResult)
    assert record.blob is not None
    return record.blob


async def test_damaged_blob_is_refused(store: FileStore, tmp_path: pathlib.Path) -> None:
    ref = await _stored_ref(store)
    path = tmp_path / "blobs" / ref.digest[:2] / ref.digest
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(BlobError, match="does not match") as info:
        await store.load_blob(ref)
    assert info.value.digest == ref.digest


async def test_missing_blob_is_refused(store: FileStore, tmp_path: pathlib.Path) -> None:
    ref = await _stored_ref(store)
    (tmp_path / "blobs" / ref.digest[:2] / ref.digest).unlink()
    with pytest.raises(BlobError, match="missing") as info:
        await store.load_blob(ref)
    assert info.value.digest == ref.digest


async def test_a_blob_that_is_not_a_file_is_refused_without_waiting(
    store: FileStore, tmp_path: pathlib.Path
) -> None:
    ref = await _stored_ref(store)
    path = tmp_path / "blobs" / ref.digest[:2] / ref.digest
    path.unlink()
    os.mkfifo(path)  # an open for reading would wait for a writer for ever
    with pytest.raises(BlobError, match="is a FIFO, not a regular file") as info:
        await store.load_blob(ref)
    assert info.value.digest == ref.digest


async def test_malformed_digest_is_refused(store: FileStore) -> None:
    with pytest.raises(BlobError, match="sha256"):
        await store.load_blob(BlobRef(digest="../../etc/passwd", size=1))


async def test_small_result_stays_inline(store: FileStore, tmp_path: pathlib.Path) -> None:
    at_limit = "a" * (THRESHOLD - 2)  # a msgpack str8 header is 2 bytes
    assert len(encoded(at_limit)) == THRESHOLD
    async with await store.create("r") as journal:
        stamped = await journal.append(
            [
                ToolResult(call_id="c1", ok=True, content={"answer": 42}),
                ToolResult(call_id="c2", ok=True, content=at_limit),
                ToolResult(call_id="c3", ok=False, content=None),
            ]
        )
    assert [r.content for r in stamped if isinstance(r, ToolResult)] == [
        {"answer": 42},
        at_limit,
        None,
    ]
    assert all(r.blob is None for r in stamped if isinstance(r, ToolResult))
    assert await store.read("r") == stamped
    assert blob_files(tmp_path) == []

    async with await store.create("r2") as journal:  # one byte more goes to the blob store
        [over] = await journal.append([ToolResult(call_id="c4", ok=True, content=at_limit + "a")])
    assert isinstance(over, ToolResult)
    assert over.blob is not None
    assert over.blob.size == THRESHOLD + 1


async def test_failed_blob_write_appends_nothing(tmp_path: pathlib.Path) -> None:
    faults = FaultyFileOps()
    async with FileStore(tmp_path, blob_threshold=THRESHOLD, file_ops=faults) as store:
        journal = await store.create("r", [started()])
        faults.fail("fsync", errno.EIO)  # the blob's fsync, before anything is framed
        with pytest.raises(OSError, match="injected"):
            await journal.append([ToolResult(call_id="c1", ok=True, content=BIG_TEXT)])
        assert list((tmp_path / "blobs").rglob("*.tmp")) == []  # its space is given back
        assert not journal.broken
        assert len(journal.events) == 1
        [record] = await journal.append([ToolResult(call_id="c1", ok=True, content=BIG_TEXT)])
        assert record.seq == 1
        await journal.aclose()
        assert await store.read("r") == journal.events


# --- redaction ---------------------------------------------------------------------------------

ANTHROPIC_KEY = "sk-ant-api03-Zx9Qm2Lk7Pw4Rt6Yh1Nb3Vc5Df8Gs0Ja"
BEARER = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlLWJ5dGVz"
AWS_KEY_ID = "AKIAIOSFODNN7EXAMPLE"
PEM_BODY = "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\nVTLw7onLRnrq0"
PEM = f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n-----END RSA PRIVATE KEY-----"
SECRETS = [ANTHROPIC_KEY, BEARER, AWS_KEY_ID, PEM_BODY]


def secret_events() -> list[Event]:
    return [
        RunStarted(
            run_id="r",
            manifest=Manifest(model="m", system=f"use key {ANTHROPIC_KEY} for calls"),
            messages=[
                {
                    "role": "user",
                    "content": [{"type": "text", "text": f"my key is {ANTHROPIC_KEY}, thanks"}],
                }
            ],
        ),
        ModelResponse(
            message={
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "input": {"headers": {"Authorization": f"Bearer {BEARER}"}},
                    }
                ],
            }
        ),
        ToolResult(
            call_id="c1",
            ok=True,
            content={"env": [f"AWS_ACCESS_KEY_ID={AWS_KEY_ID}", "HOME=/root"], "key": PEM},
        ),
        Resolved(call_id="c1", outcome="succeeded", result=[[f"x {AWS_KEY_ID}"]]),
        Decision(call_id="c1", approved=True, by="ops", note=f"rotated {ANTHROPIC_KEY}"),
    ]


async def test_default_redactor_keeps_secrets_off_disk(tmp_path: pathlib.Path) -> None:
    async with FileStore(tmp_path) as store, await store.create("r") as journal:
        stamped = await journal.append(secret_events())
    raw = (tmp_path / "runs" / "r.journal").read_bytes()
    for secret in SECRETS:
        assert secret.encode() not in raw, secret
        assert secret not in repr(stamped)
    assert b"PRIVATE KEY" not in raw
    assert raw.count(b"[REDACTED]") >= 7

    async with FileStore(tmp_path) as store:
        events = await store.read("r")
    assert events == stamped
    first, response, result, resolved, decision = events
    assert isinstance(first, RunStarted)
    assert first.messages[0]["content"][0]["text"] == "my key is [REDACTED], thanks"
    assert first.manifest.system == "use key [REDACTED] for calls"
    assert isinstance(response, ModelResponse)
    tool_input = response.message["content"][0]["input"]
    assert tool_input == {"headers": {"Authorization": "[REDACTED]"}}
    assert isinstance(result, ToolResult)
    assert result.content == {
        "env": ["AWS_ACCESS_KEY_ID=[REDACTED]", "HOME=/root"],
        "key": "[REDACTED]",
    }
    assert isinstance(resolved, Resolved)
    assert resolved.result == [["x [REDACTED]"]]
    assert isinstance(decision, Decision)
    assert decision.note == "rotated [REDACTED]"


async def test_secrets_in_blobs_are_redacted_too(tmp_path: pathlib.Path) -> None:
    content = BIG_TEXT + f"token: Bearer {BEARER}\n"
    async with (
        FileStore(tmp_path, blob_threshold=THRESHOLD) as store,
        await store.create("r") as journal,
    ):
        [record] = await journal.append([ToolResult(call_id="c1", ok=True, content=content)])
        assert isinstance(record, ToolResult)
        assert record.blob is not None
        assert await store.load_blob(record.blob) == BIG_TEXT + "token: [REDACTED]\n"
    [blob] = blob_files(tmp_path)
    assert BEARER.encode() not in blob.read_bytes()


def test_event_without_secrets_is_returned_unchanged() -> None:
    redactor = SecretRedactor()
    for event in [
        started(),
        ModelResponse(message={"role": "assistant", "content": "sk-short is not a key"}),
        ToolResult(call_id="c", ok=True, content={"rows": [1, 2, {"a": "AKIA-lowercase"}]}),
    ]:
        assert redactor(event) is event


def test_redactor_patterns_can_be_extended_or_replaced() -> None:
    event = ModelResponse(message={"text": f"ticket INT-12345 and {AWS_KEY_ID}"})
    extended = SecretRedactor(extra=[r"INT-[0-9]+"])(event)
    assert extended.message == {"text": "ticket [REDACTED] and [REDACTED]"}
    assert SecretRedactor(patterns=[])(event) is event
    only_tickets = SecretRedactor(patterns=[r"INT-[0-9]+"])(event)
    assert only_tickets.message == {"text": f"ticket [REDACTED] and {AWS_KEY_ID}"}


async def test_redact_none_writes_events_as_given(tmp_path: pathlib.Path) -> None:
    async with FileStore(tmp_path, redact=None) as store, await store.create("r") as journal:
        stamped = await journal.append(secret_events())
    raw = (tmp_path / "runs" / "r.journal").read_bytes()
    for secret in SECRETS:
        if "\n" not in secret:  # msgpack stores strings verbatim
            assert secret.encode() in raw, secret
    assert PEM.encode() in raw
    assert b"[REDACTED]" not in raw
    async with FileStore(tmp_path) as store:
        assert await store.read("r") == stamped


async def test_custom_redactor_is_applied_to_every_event(tmp_path: pathlib.Path) -> None:
    seen: list[Event] = []

    def shout(event: Event) -> Event:
        seen.append(event)
        if isinstance(event, ModelResponse):
            text = str(event.message.get("content", ""))
            return msgspec.structs.replace(event, message={"content": text.upper()})
        return event

    async with (
        FileStore(tmp_path, redact=shout) as store,
        await store.create("r", [started()]) as journal,
    ):
        await journal.append([ModelResponse(message={"content": "quiet"})])
        await journal.append(
            [ModelResponse(message={"content": "calm"}), ToolResult(call_id="c", ok=True)]
        )
    assert [type(e).__name__ for e in seen] == [
        "RunStarted",
        "ModelResponse",
        "ModelResponse",
        "ToolResult",
    ]
    assert all(e.seq == -1 for e in seen)  # redaction runs before stamping
    async with FileStore(tmp_path) as store:
        events = await store.read("r")
    assert [e.message for e in events if isinstance(e, ModelResponse)] == [
        {"content": "QUIET"},
        {"content": "CALM"},
    ]


def test_the_models_signed_and_encrypted_content_is_never_redacted() -> None:
    """A credential-shaped placeholder the model thought about must survive: the API checks
    the thinking block's signature when it is sent back, and an altered one fails with 400."""
    secret = "sk-ant-" + "a" * 40
    blocks: list[dict[str, Any]] = [
        {"type": "thinking", "thinking": f"the key looks like {secret}", "signature": "EqQB"},
        {"type": "redacted_thinking", "data": f"opaque {secret}"},
        {"type": "web_search_tool_result", "tool_use_id": "s1", "content": [
            {"type": "web_search_result", "url": "u", "encrypted_content": secret},
        ]},
        {"type": "text", "text": f"I will not repeat {secret}", "citations": [
            {"type": "web_search_result_location", "encrypted_index": secret, "cited_text": "c"},
        ]},
    ]  # fmt: skip
    event = ModelResponse(message={"role": "assistant", "content": blocks})
    redacted = SecretRedactor()(event)
    out = redacted.message["content"]
    assert out[0] == blocks[0]
    assert out[1] == blocks[1]
    assert out[2] == blocks[2]
    assert out[3]["citations"] == blocks[3]["citations"]
    assert out[3]["text"] == "I will not repeat [REDACTED]"  # the model's plain text is not signed
