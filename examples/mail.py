"""The email agent of ``tether demo mail`` as a crash-test scenario.

``search_notes`` -> ``summarise`` -> ``send_email`` (policy ``idempotency_key``), then a final
answer. The mail service appends one JSON line per delivered email to a file under the
scenario's root and deduplicates by key. The demo is this very scenario, killed once, with its
timeline printed.

    tether crashtest examples.mail:scenario
"""

from __future__ import annotations

from tether.demo import MAIL

scenario = MAIL.scenario
"""The Q3 report email."""
