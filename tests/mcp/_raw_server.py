"""A stdio MCP server written by hand (newline-delimited JSON-RPC, no SDK), to answer in ways
the SDK's server side never does. ``MCP_RAW`` chooses how:

- ``rpc_error``: every ``tools/call`` is answered with JSON-RPC error -32000 ("db down"),
  the first code of the range JSON-RPC leaves to a server's own errors;
- ``malformed``: every ``tools/call`` gets a result whose ``content`` is not a list;
- ``collide``: it lists ``bad name!`` and ``bad_name_``, which become one tool name;
- ``dies``: it writes why on its standard error and exits 2 before reading anything.

Each ``tools/call`` is appended to ``calls`` in the working directory (with the pid) first.
"""

from __future__ import annotations

import json
import os
import sys

MODE = os.environ.get("MCP_RAW", "")
SCHEMA = {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}


def send(message: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def tools() -> list[dict[str, object]]:
    if MODE == "collide":
        return [{"name": n, "inputSchema": SCHEMA} for n in ("bad name!", "bad_name_")]
    return [{"name": "write", "description": "Write x.", "inputSchema": SCHEMA}]


def main() -> None:
    if MODE == "dies":
        sys.stderr.write("usage: raw_server --db URL (no database given)\n")
        sys.exit(2)
    for line in sys.stdin:
        message = json.loads(line)
        method, mid = message.get("method"), message.get("id")
        if mid is None:
            continue  # a notification
        if method == "initialize":
            info = {"name": "raw", "version": "0"}
            result = {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": info,
            }
            send({"jsonrpc": "2.0", "id": mid, "result": result})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": mid, "result": {"tools": tools()}})
        elif method == "tools/call":
            with open("calls", "a") as calls:
                calls.write(f"{os.getpid()} {json.dumps(message['params']['arguments'])}\n")
            if MODE == "rpc_error":
                error = {"code": -32000, "message": "db down"}
                send({"jsonrpc": "2.0", "id": mid, "error": error})
            elif MODE == "malformed":
                send({"jsonrpc": "2.0", "id": mid, "result": {"content": "garbage"}})
            else:
                text = {"type": "text", "text": "written"}
                send({"jsonrpc": "2.0", "id": mid, "result": {"content": [text]}})
        else:
            send({"jsonrpc": "2.0", "id": mid, "result": {}})


if __name__ == "__main__":
    main()
