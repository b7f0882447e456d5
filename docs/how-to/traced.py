"""A run traced with OpenTelemetry: ``python traced.py``.

Spans go to the SDK's in-memory exporter and are printed at the end; in production, give the
``TracerProvider`` your exporter (OTLP, say) and a ``BatchSpanProcessor``.
"""

from __future__ import annotations

import uuid
from typing import Any

import anyio
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import tether
from tether.otel import OpenTelemetry

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))  # exports each span as it ends

tools = tether.ToolRegistry()


@tools.tool(policy="rerun")
async def get_ticket(ticket_id: str) -> dict[str, Any]:
    """Look a ticket up."""
    return {"id": ticket_id, "title": "Customer locked out after SSO change"}


use = tether.ScriptedModel.tool_use
model = tether.ScriptedModel(
    [[use("toolu_01", "get_ticket", {"ticket_id": "KITE-142"})], "KITE-142 is an SSO lockout."]
)


async def main() -> None:
    telemetry = OpenTelemetry(tracer_provider=provider, agent_name="helpdesk")
    store = tether.FileStore("tether-data")
    run_id = f"traced-{uuid.uuid4().hex[:8]}"  # a new run each time the script runs
    async with tether.Supervisor(store, model=model, tools=tools, telemetry=telemetry) as sup:
        await sup.start(run_id, "Ticket KITE-142 just came in.")
        await sup.wait(run_id)
    for span in exporter.get_finished_spans():
        attributes = span.attributes or {}
        print(span.name, {k: v for k, v in attributes.items() if k.startswith("gen_ai.op")})


anyio.run(main)
