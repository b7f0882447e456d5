"""The GenAI client metrics: ``gen_ai.client.token.usage`` and ``gen_ai.client.operation.duration``.

Both are histograms with the buckets the semantic conventions advise, recorded once per model
call this process really made (a replayed answer records nothing). Token usage is recorded
twice per call, by ``gen_ai.token.type``: ``input`` (cache reads and writes included, as the
conventions ask) and ``output``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from opentelemetry import metrics

from .._version import __version__
from ..journal import Usage

TOKEN_BUCKETS = [4.0**n for n in range(14)]  # 1, 4, 16, ... 67,108,864
DURATION_BUCKETS = [0.01 * 2.0**n for n in range(14)]  # 0.01 s, 0.02 s, ... 81.92 s


@dataclass(frozen=True)
class Instruments:
    token_usage: metrics.Histogram
    duration: metrics.Histogram

    @classmethod
    def create(cls, provider: metrics.MeterProvider | None) -> Instruments:
        meter = metrics.get_meter("tether", __version__, meter_provider=provider)
        return cls(
            token_usage=meter.create_histogram(
                "gen_ai.client.token.usage",
                unit="{token}",
                description="Number of input and output tokens used.",
                explicit_bucket_boundaries_advisory=TOKEN_BUCKETS,
            ),
            duration=meter.create_histogram(
                "gen_ai.client.operation.duration",
                unit="s",
                description="GenAI operation duration.",
                explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
            ),
        )

    def record_usage(self, usage: Usage, attributes: dict[str, Any]) -> None:
        self.token_usage.record(input_tokens(usage), {**attributes, "gen_ai.token.type": "input"})
        self.token_usage.record(usage.output_tokens, {**attributes, "gen_ai.token.type": "output"})


def input_tokens(usage: Usage) -> int:
    """All input tokens of a call: tether keeps the cache's parts apart, the conventions
    count them in."""
    return usage.input_tokens + usage.cache_creation_input_tokens + usage.cache_read_input_tokens
