"""The default redactor's first look (its hints over the MessagePack bytes) never lets a secret
through that the patterns themselves would catch."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tether import SecretRedactor
from tether.journal import ModelResponse, ToolResult
from tether.journal._redact import DEFAULT_HINTS, _holds_hint

SECRETS = [
    "sk-ant-" + "a1B2_c3-" * 3,
    "sk-" + "Z" * 40,
    "AKIA" + "ABCDEFGHIJ012345",
    "ghp_" + "x" * 36,
    "gho_" + "Y" * 31,
    "xoxb-" + "1234567890ab",
    "Bearer " + "tok.en~+/" * 3,
    "bEaReR\u2003" + "q" * 20,  # a Unicode space: the pattern's \s takes it
    "-----BEGIN RSA PRIVATE KEY-----\nMIIB\n-----END RSA PRIVATE KEY-----",
]

texts = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)
strings = st.builds(
    lambda before, secret, after: before + secret + after,
    texts,
    st.sampled_from(["", *SECRETS]),
    texts,
)
contents = st.recursive(
    strings | st.integers() | st.none(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=6,
)

# The same patterns with one more that never matches: no hints, every event searched.
reference = SecretRedactor(extra=[r"(?!)"])
hinted = SecretRedactor()


@given(contents)
def test_hints_never_let_a_secret_through(content: Any) -> None:
    event = ToolResult(call_id="toolu_1", ok=True, content=content)
    assert hinted(event) == reference(event)


@given(strings)
def test_hints_in_a_model_message_too(text: str) -> None:
    message = {"role": "assistant", "content": [{"type": "text", "text": text}]}
    event = ModelResponse(message=message)
    assert hinted(event) == reference(event)


def test_an_event_with_no_hint_is_not_searched_further() -> None:
    event = ToolResult(call_id="toolu_1", ok=True, content={"text": "nothing to see", "n": 1})
    assert hinted(event) is event
    assert all(hint == hint.lower() for hint in DEFAULT_HINTS)


def test_other_patterns_have_no_hints() -> None:
    custom = SecretRedactor(extra=[r"secret-\d+"])
    event = ToolResult(call_id="toolu_1", ok=True, content="the code is secret-42")
    assert custom(event).content == "the code is [REDACTED]"


@given(st.binary(max_size=40), st.sampled_from(DEFAULT_HINTS), st.binary(max_size=40))
def test_the_written_out_search_finds_every_hint(before: bytes, hint: bytes, after: bytes) -> None:
    assert _holds_hint(before + hint + after)
    assert _holds_hint(before + after) == any(h in before + after for h in DEFAULT_HINTS)
