"""Which replay policy a tool from an MCP server gets, and why: a pure function, table-tested.

A server's tool annotations say what a tool does to the world. The specification calls them
hints, and says a client must not base decisions on the annotations of a server it does not
trust; so they count only for a server the application marks ``trusted=True``:

================================================  =====================  ======================
the tool                                          trusted server         untrusted server
================================================  =====================  ======================
the app set ``policy`` for it (``ToolOptions``)   that policy            that policy
the app gave it a ``verify`` function             (below)                ``verify``
``readOnlyHint: true``                            ``rerun``              ``escalate``
``idempotentHint: true`` (and not read-only)      ``rerun``              ``escalate``
otherwise, with a ``verify`` function             ``verify``             ``verify``
otherwise, the server honours tether's key        ``idempotency_key``    ``escalate``
(``MCPServer(idempotency_key=True)``)
otherwise                                         ``escalate``           ``escalate``
================================================  =====================  ======================

``destructiveHint`` and ``openWorldHint`` do not choose a policy: they say how far an effect
reaches, not whether repeating it is safe (a non-destructive, additive tool repeated adds
twice). Hints a server leaves out take the specification's defaults (``readOnlyHint`` and
``idempotentHint`` false), so a tool that says nothing is ``escalate``.
"""

from __future__ import annotations

from mcp import types

from ..tools import ReplayPolicy
from ..tools._adapters import ToolOptions


def derive_policy(
    annotations: types.ToolAnnotations | None,
    options: ToolOptions,
    *,
    trusted: bool,
    idempotency_key: bool,
) -> tuple[ReplayPolicy, str]:
    """The policy of one server tool and the reason, in words, as the module's table says.

    Args:
        annotations: the tool's annotations as the server listed them, or ``None``.
        options: what the application set for this tool.
        trusted: whether the application trusts the server's annotations.
        idempotency_key: whether the application says the server deduplicates calls by the
            idempotency key tether sends in the request's ``_meta``.

    Raises:
        ValueError: ``options.policy`` is not a policy name.
    """
    if options.policy is not None:
        return ReplayPolicy(options.policy), "set by the application"
    if options.verify is not None and not (trusted and _safe_to_repeat(annotations)):
        return ReplayPolicy.VERIFY, "the application's verify function"
    if not trusted:
        return ReplayPolicy.ESCALATE, "the server is not trusted, so its annotations are not"
    if annotations is not None and annotations.readOnlyHint is True:
        return ReplayPolicy.RERUN, "readOnlyHint"
    if annotations is not None and annotations.idempotentHint is True:
        return ReplayPolicy.RERUN, "idempotentHint"
    if idempotency_key:
        return ReplayPolicy.IDEMPOTENCY_KEY, "the server honours the idempotency key"
    return ReplayPolicy.ESCALATE, "not read-only, not idempotent"


def _safe_to_repeat(annotations: types.ToolAnnotations | None) -> bool:
    return annotations is not None and (
        annotations.readOnlyHint is True or annotations.idempotentHint is True
    )
