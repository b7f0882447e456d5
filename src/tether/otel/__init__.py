"""OpenTelemetry spans and metrics for runs, per the GenAI semantic conventions (``otel`` extra).

``Supervisor(..., telemetry=OpenTelemetry())`` reports every drive of a run, every model call
and every tool attempt this process really makes, in one trace per run across processes. See
``_tracing`` for the spans and their attributes, ``_metrics`` for the metrics, ``_content``
for how messages are recorded when content capture is on.
"""

from __future__ import annotations

from .._public import publish as _publish
from ._tracing import CAPTURE_CONTENT_ENV as CAPTURE_CONTENT_ENV
from ._tracing import OpenTelemetry as OpenTelemetry

__all__ = ["CAPTURE_CONTENT_ENV", "OpenTelemetry"]

_publish(__name__, globals(), __all__)
