"""What to do with a tool call that was started but has no recorded result, and with approvals
that nobody answers in time."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal, TypeAlias

PolicyName: TypeAlias = Literal["rerun", "idempotency_key", "verify", "escalate"]
"""The string spellings ``ToolRegistry.tool(policy=...)`` accepts besides the enum members."""

ApprovalTimeoutName: TypeAlias = Literal["reject", "escalate"]
"""The string spellings ``ToolRegistry.tool(on_approval_timeout=...)`` accepts."""


class ReplayPolicy(StrEnum):
    """How a tool's *dangling call* is handled when a run resumes.

    A call dangles when its ``tool_started`` record is in the journal but its ``tool_result`` is
    not: the process died while the tool ran, so whether its side effect happened is unknown.
    Each tool declares its policy when it is registered:

    ===================  ======================================================================
    policy               on a dangling call
    ===================  ======================================================================
    ``rerun``            run it again. For reads with no side effect (search, fetch, list).
    ``idempotency_key``  run it again with the same ``ToolContext.idempotency_key``; the
                         receiver deduplicates, so the effect happens at most once.
    ``verify``           call the tool's ``verify`` function with the same arguments and key.
                         A result (not ``None``) means the call landed: that result is recorded
                         as the call's result. ``None`` means it did not: run it again with the
                         same key.
    ``escalate``         stop the run as ``needs_attention``. A person resolves it: it happened
                         (with a result), run it again, or fail it. The default, because it is
                         the only policy that is safe for a tool nobody has thought about.
    ===================  ======================================================================

    A call that never started (no ``tool_started``) or that finished (a ``tool_result``) is never
    subject to its policy: the first runs normally, the second replays its recorded result.
    """

    RERUN = "rerun"
    IDEMPOTENCY_KEY = "idempotency_key"
    VERIFY = "verify"
    ESCALATE = "escalate"


class ApprovalTimeout(StrEnum):
    """What happens when a tool call waits for approval past its deadline.

    ============  ===========================================================================
    value         on expiry
    ============  ===========================================================================
    ``reject``    treat it as a rejection: the model gets an error tool result saying the
                  approval timed out, and the run continues. The default.
    ``escalate``  stop the run as ``needs_attention`` so that a person decides.
    ============  ===========================================================================
    """

    REJECT = "reject"
    ESCALATE = "escalate"
