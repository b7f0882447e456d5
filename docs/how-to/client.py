"""Send a ticket to the service, approve its reply through the console's API, read the answer.

``python client.py URL TICKET``
"""

from __future__ import annotations

import json
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

TOKEN = Path("tokens").read_text().strip().split(":", 1)[1]


def call(url: str, body: dict[str, Any] | None = None) -> Any:
    """GET ``url``, or POST ``body`` to it as JSON; the JSON answer."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {TOKEN}"})
    if body is not None:
        request.data = json.dumps(body).encode()
        request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.load(answer)


def wait_for(url: str, status: str) -> dict[str, Any]:
    """Poll ``url`` until the run has ``status`` (a minute at most)."""
    deadline = time.monotonic() + 60
    while True:
        seen: dict[str, Any] = call(url)
        if seen["status"] == status:
            return seen
        if time.monotonic() > deadline:
            raise TimeoutError(f"still {seen['status']}")
        time.sleep(0.2)


def main(service: str, ticket: str) -> None:
    created = call(f"{service}/tickets", {"ticket": ticket, "text": "Locked out after SSO."})
    run_id = created["run_id"]
    print(f"created {run_id}")
    waiting = wait_for(f"{service}/tickets/{run_id}", "waiting_for_approval")
    for call_id in waiting["waiting_for"]:
        url = f"{service}/console/api/runs/{run_id}/calls/{call_id}/approve"
        print(call(url, {"note": "fine"})["message"])
    print(wait_for(f"{service}/tickets/{run_id}", "done")["answer"])


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
