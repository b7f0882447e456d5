"""An SDK tracer provider and meter provider with in-memory exporters, per test."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tether.otel import OpenTelemetry


@dataclass
class Exported:
    tracer_provider: TracerProvider
    meter_provider: MeterProvider
    spans_out: InMemorySpanExporter
    metrics_out: InMemoryMetricReader

    def telemetry(self, **options: object) -> OpenTelemetry:
        return OpenTelemetry(
            tracer_provider=self.tracer_provider,
            meter_provider=self.meter_provider,
            **options,  # type: ignore[arg-type]
        )

    def spans(self) -> list[ReadableSpan]:
        return list(self.spans_out.get_finished_spans())

    def named(self, prefix: str) -> list[ReadableSpan]:
        return [s for s in self.spans() if s.name.startswith(prefix)]


@pytest.fixture
def exported() -> Iterator[Exported]:
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    yield Exported(tracer_provider, meter_provider, spans, reader)
    tracer_provider.shutdown()
    meter_provider.shutdown()
