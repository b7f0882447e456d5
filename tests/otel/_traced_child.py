"""A process that starts run ``run-1`` of ``_agent`` with tracing, spans written to a file.

``python -m tests.otel._traced_child STORE DESK SPANS``: every span that ends is written to
SPANS at once, one JSON object a line (the SDK's console exporter on a simple processor), so
what a process exported before it was killed with ``SIGKILL`` (the test arms
``TETHER_CRASH_AT``) can be read back.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

import tether
from tether.otel import OpenTelemetry
from tether.supervisor import Supervisor

from ._agent import RUN, app


def one_line(span: ReadableSpan) -> str:
    text: str = span.to_json(indent=None)
    return text + "\n"


async def main(store: Path, desk: Path, spans: Path) -> None:
    with spans.open("a") as out:
        provider = TracerProvider()
        provider.add_span_processor(
            SimpleSpanProcessor(ConsoleSpanExporter(out=out, formatter=one_line))
        )
        model, tools = app(desk)
        telemetry = OpenTelemetry(tracer_provider=provider, agent_name="helpdesk")
        async with Supervisor(
            tether.FileStore(store), model=model, tools=tools, telemetry=telemetry
        ) as sup:
            await sup.start(RUN, "Help with K-1.")
            print((await sup.wait(RUN, timeout=30)).value, flush=True)
        provider.shutdown()


if __name__ == "__main__":
    anyio.run(main, Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
