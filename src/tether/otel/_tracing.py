"""``OpenTelemetry``: a run's work as spans and metrics per the GenAI semantic conventions.

The spans of one run, across every process that drove it, form one trace:

- ``start_run`` (internal), when the run is created: the trace's root (or a child of the span
  current in the code that created it). Its context is journaled in ``run_started``. It is
  reported only once the run exists: a start refused because the run exists (a worker that
  starts its runs idempotently) leaves no span, and no trace of its own.
- ``invoke_agent [NAME]`` (internal), one per drive of the run in a process, a child of
  ``start_run`` through the journaled context, so a drive in a later process (after a crash,
  a deploy, on another machine) lands in the same trace.
- ``chat MODEL`` (client), one per model call this drive made.
- ``execute_tool NAME`` (internal), one per tool attempt this drive made (and per ``verify``
  check), current while the tool runs so that spans the tool opens nest under it.

Nothing is reported for what the drive replayed from the journal: an answer recorded by an
earlier process has its ``chat`` span there (if that process lived to export it) and none
here. A dangling call run again is a new ``execute_tool`` span with ``tether.attempt`` one
higher and ``tether.dangling`` true. A process killed mid-drive exports nothing for the spans
it had open (its ``invoke_agent``, the call it was in): those did not end.

Content (messages, system instructions, tool arguments and results) is customer data: it is
recorded only with ``capture_content=True`` or ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT
=true``. Idempotency keys are never recorded: they are built from ids, but a key is a
capability at a service that deduplicates by it. Exception messages are not recorded either
(only ``error.type``), since they often quote what a tool was given.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, final

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from .._errors import ModelError
from .._version import __version__
from ..journal import Event, ToolFailed, ToolResult, Waiting
from ..models import Message, ModelReply
from ._content import messages_json, output_json, system_json, value_json
from ._metrics import Instruments, input_tokens

CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""The environment variable that turns content capture on (``true``), as in OpenTelemetry's
own GenAI instrumentations; ``OpenTelemetry(capture_content=...)`` wins over it."""

_PROPAGATOR = TraceContextTextMapPropagator()


@final
class OpenTelemetry:
    """Report runs to OpenTelemetry: ``Supervisor(..., telemetry=OpenTelemetry())``.

    Args:
        tracer_provider, meter_provider: where spans and metrics go; the global providers
            (``opentelemetry.trace.set_tracer_provider``) by default.
        agent_name: ``gen_ai.agent.name``, also in the ``invoke_agent`` span's name.
        provider_name: ``gen_ai.provider.name`` of the model calls (``"anthropic"``).
        capture_content: record messages, system instructions, tool arguments and results
            as span attributes; by default only if ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_
            MESSAGE_CONTENT`` is ``true``.
    """

    def __init__(
        self,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: Any = None,
        agent_name: str | None = None,
        provider_name: str | None = None,
        capture_content: bool | None = None,
    ) -> None:
        self._tracer = trace.get_tracer("tether", __version__, tracer_provider=tracer_provider)
        self._instruments = Instruments.create(meter_provider)
        self.agent_name = agent_name
        self.provider_name = provider_name
        if capture_content is None:
            capture_content = os.environ.get(CAPTURE_CONTENT_ENV, "").strip().lower() == "true"
        self.capture_content = capture_content

    @contextmanager
    def start_run(self, run_id: str) -> Iterator[dict[str, str] | None]:
        """The run's ``start_run`` span, around its creation; gives its context, to journal.

        The span ends, and so is exported, only when the block ends without an exception: the
        run exists. A refused start (``RunExistsError``, a store that failed) leaves the span
        unended, and an unended span is never exported; nothing else was made in its context.
        """
        span = self._start_span(run_id)
        carrier = _context_of(span)
        yield carrier
        span.end()

    def run_context(self, run_id: str) -> dict[str, str] | None:
        """Open and end a child run's ``start_run`` span; its context, to journal."""
        span = self._start_span(run_id)
        carrier = _context_of(span)
        span.end()
        return carrier

    def _start_span(self, run_id: str) -> Span:
        return self._tracer.start_span(
            "start_run",
            kind=SpanKind.INTERNAL,
            attributes={"tether.run.id": run_id, "gen_ai.conversation.id": run_id},
        )

    def drive(
        self,
        *,
        run_id: str,
        trace: dict[str, str] | None,
        model: str,
        fresh: bool,
        restarts: int,
        cause: str,
    ) -> _DriveSpan:
        """Open the ``invoke_agent`` span of one drive of ``run_id``."""
        return _DriveSpan(
            self, run_id=run_id, carrier=trace, model=model, restarts=restarts, cause=cause
        )


class _DriveSpan:
    def __init__(
        self,
        otel: OpenTelemetry,
        *,
        run_id: str,
        carrier: dict[str, str] | None,
        model: str,
        restarts: int,
        cause: str,
    ) -> None:
        self.otel = otel
        self.run_id = run_id
        self.model = model
        parent = _PROPAGATOR.extract(carrier) if carrier else None
        name = otel.agent_name
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.conversation.id": run_id,
            "gen_ai.request.model": model,
            "tether.run.id": run_id,
            "tether.restarts": restarts,
        }
        if name:
            attributes["gen_ai.agent.name"] = name
        if cause:
            attributes["tether.resume.cause"] = cause
        self.span = otel._tracer.start_span(
            f"invoke_agent {name}" if name else "invoke_agent",
            context=parent,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
        )
        self.context = trace.set_span_in_context(self.span)

    def end(
        self, *, status: str | None, reason: str = "", error: BaseException | None = None
    ) -> None:
        span = self.span
        if error is not None:
            _failed(span, error)
        elif status is None:
            span.set_attribute("tether.status", "suspended")
        else:
            span.set_attribute("tether.status", status)
            if status == "failed":
                span.set_status(Status(StatusCode.ERROR, reason))
        span.end()

    @contextmanager
    def chat(self, *, system: Any, messages: Sequence[Message]) -> Iterator[_ChatSpan]:
        otel = self.otel
        provider = otel.provider_name
        common: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": self.model,
        }
        if provider:
            common["gen_ai.provider.name"] = provider
        span = otel._tracer.start_span(
            f"chat {self.model}",
            context=self.context,
            kind=SpanKind.CLIENT,
            attributes={**common, "tether.run.id": self.run_id},
        )
        if otel.capture_content:
            span.set_attribute("gen_ai.input.messages", messages_json(messages))
            instructions = system_json(system)
            if instructions is not None:
                span.set_attribute("gen_ai.system_instructions", instructions)
        chat = _ChatSpan(span, otel, common)
        began = time.perf_counter()
        try:
            with trace.use_span(span, record_exception=False, set_status_on_exception=False):
                yield chat
        except BaseException as exc:
            _failed(span, exc)
            if isinstance(exc, ModelError):
                span.set_attribute("tether.model.transient", exc.transient)
            common = {**common, "error.type": _error_type(exc)}
            raise
        finally:
            otel._instruments.duration.record(time.perf_counter() - began, common)
            span.end()

    @contextmanager
    def tool(
        self,
        *,
        name: str,
        call_id: str,
        attempt: int,
        policy: str,
        dangling: bool,
        arguments: Any,
        seq: int,
        verify: bool = False,
    ) -> Iterator[_ToolSpan]:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.type": "function",
            "tether.run.id": self.run_id,
            "tether.seq": seq,
            "tether.attempt": attempt,
            "tether.replay_policy": policy,
            "tether.dangling": dangling,
        }
        if verify:
            attributes["tether.verify"] = True
        if self.otel.capture_content:
            attributes["gen_ai.tool.call.arguments"] = value_json(arguments)
        span = self.otel._tracer.start_span(
            f"execute_tool {name}",
            context=self.context,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
        )
        try:
            with trace.use_span(span, record_exception=False, set_status_on_exception=False):
                yield _ToolSpan(span, self.otel.capture_content)
        except BaseException as exc:
            _failed(span, exc)
            raise
        finally:
            span.end()


class _ChatSpan:
    def __init__(self, span: Span, otel: OpenTelemetry, common: dict[str, Any]) -> None:
        self.span = span
        self.otel = otel
        self.common = common

    def answered(self, reply: ModelReply, *, seq: int) -> None:
        span, usage = self.span, reply.usage
        span.set_attribute("tether.seq", seq)
        if reply.response_id:
            span.set_attribute("gen_ai.response.id", reply.response_id)
        if reply.stop_reason:
            span.set_attribute("gen_ai.response.finish_reasons", [reply.stop_reason])
        span.set_attribute("gen_ai.usage.input_tokens", input_tokens(usage))
        span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
        span.set_attribute("gen_ai.usage.cache_read.input_tokens", usage.cache_read_input_tokens)
        span.set_attribute(
            "gen_ai.usage.cache_creation.input_tokens", usage.cache_creation_input_tokens
        )
        if self.otel.capture_content:
            span.set_attribute(
                "gen_ai.output.messages", output_json(reply.as_message(), reply.stop_reason)
            )
        self.otel._instruments.record_usage(usage, self.common)


class _ToolSpan:
    def __init__(self, span: Span, capture: bool) -> None:
        self.span = span
        self.capture = capture

    def ended(self, outcome: Event, *, seq: int) -> None:
        span = self.span
        span.set_attribute("tether.result_seq", seq)
        if isinstance(outcome, ToolResult):
            span.set_attribute("tether.outcome", "result" if outcome.ok else "error")
            if not outcome.ok:
                span.set_attribute("error.type", "tool_error")
                span.set_status(Status(StatusCode.ERROR))
            if self.capture:
                content = outcome.content if outcome.blob is None else outcome.blob.summary
                span.set_attribute("gen_ai.tool.call.result", value_json(content))
        elif isinstance(outcome, ToolFailed) and outcome.unsent:
            span.set_attribute("tether.outcome", "unsent")
            span.set_attribute("error.type", "tool_unavailable")
            span.set_status(Status(StatusCode.ERROR))
        elif isinstance(outcome, ToolFailed):
            unknown = outcome.timed_out
            span.set_attribute("tether.outcome", "unknown" if unknown else "failed")
            span.set_attribute("error.type", "outcome_unknown" if unknown else "retryable_error")
            span.set_status(Status(StatusCode.ERROR))
        elif isinstance(outcome, Waiting):
            span.set_attribute("tether.outcome", "waiting")


def _context_of(span: Span) -> dict[str, str] | None:
    """The W3C trace context of ``span``, ``None`` from a no-op provider (no SDK installed),
    which has no context to give."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
    return carrier or None


def _failed(span: Span, error: BaseException) -> None:
    span.set_attribute("error.type", _error_type(error))
    span.set_status(Status(StatusCode.ERROR))


def _error_type(error: BaseException) -> str:
    return type(error).__qualname__
