"""``encode_group`` frames events straight into one buffer: byte for byte what ``build_group``
makes of the same events encoded apart, so a reader cannot tell which wrote a journal."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tether.journal._format import build_group, encode_group, encode_header, payload_crc
from tether.journal._reader import scan
from tether.journal._records import ENCODER, ToolResult
from tether.journal._writer import frame_events

results = st.lists(
    st.builds(
        lambda i, text: ToolResult(call_id=f"toolu_{i}", ok=True, content=text),
        st.integers(0, 10_000),
        st.text(max_size=300),
    ),
    min_size=1,
    max_size=6,
)


@given(results)
def test_one_buffer_gives_the_same_bytes_as_payloads_copied_in(events: list[ToolResult]) -> None:
    group, sizes = encode_group(events, ENCODER.encode_into)
    payloads = [ENCODER.encode(e) for e in events]
    assert group == build_group([(p, payload_crc(p)) for p in payloads])
    assert sizes == [len(p) for p in payloads]


@given(results)
def test_a_framed_group_reads_back_stamped(events: list[ToolResult]) -> None:
    stamped, group = frame_events(list(events), 0, "run.journal")
    assert [e.seq for e in stamped] == list(range(len(events)))
    found = scan(encode_header("run") + group, "run.journal", expect_run_id="run")
    assert found.events == stamped
