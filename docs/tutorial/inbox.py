"""Approve, through the console's JSON API, every reply waiting in its inbox.

``python inbox.py URL``: the token is read from ``tokens`` (``NAME:TOKEN``, as ``tether serve
--token-file`` reads it); the identity recorded as the approver is the token's NAME.
"""

from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path
from typing import Any

TOKEN = Path("tokens").read_text().strip().split(":", 1)[1]


def call(url: str, body: dict[str, Any] | None = None) -> Any:
    """GET ``url`` (or POST ``body`` as JSON to it) with the bearer token; the JSON answer."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {TOKEN}"})
    if body is not None:
        request.data = json.dumps(body).encode()
        request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.load(answer)


def main(console: str) -> None:
    for waiting in call(f"{console}/api/inbox")["calls"]:
        print(f"{waiting['run_id']}: {waiting['tool']}({waiting['arguments_json']})")
        if waiting["awaiting"] == "approval" and waiting["tool"] == "reply_to_customer":
            url = f"{console}/api/runs/{waiting['run_id']}/calls/{waiting['call_id']}/approve"
            print(call(url, {"note": "approved from the API"})["message"])


if __name__ == "__main__":
    main(sys.argv[1])
