"""``python -m tests.supervisor._claude_child ROOT``: start or resume a run on AnthropicModel
against a fresh strict fake of the Messages API; prints ``done sent=[...] requests=N``.

The first answer holds a signed thinking block and a tool call, so a process killed right after
saving it (``TETHER_CRASH_AT=model_saved``) leaves a journal whose resumed request must carry
the thinking block back unchanged (the fake checks its signature with the secret every fake
shares, as the real API's key is the same for every process).
"""

from __future__ import annotations

import contextlib
import pathlib
import sys

import anyio

import tether
from tether.supervisor import Supervisor

from ..models._messages_api import MessagesAPI, answer, text, thinking, tool_use

THOUGHT = "The key sk-ant-api03-" + "y" * 40 + " is a placeholder; send the email."


async def main(root: pathlib.Path) -> None:
    sent = root / "sent"
    store = root / "store"
    resuming = store.exists()
    api = MessagesAPI(
        *(
            [answer(text("Email sent."))]
            if resuming
            else [
                answer(
                    thinking(THOUGHT), tool_use("toolu_1", "send_email", {"to": "d", "body": "x"})
                )
            ]
        )
    )
    tools = tether.ToolRegistry()

    @tools.tool(policy="idempotency_key")
    async def send_email(to: str, body: str) -> str:
        """Send an email."""
        with sent.open("a") as f:
            f.write("Done.\n")
        return "sent"

    async with api.client() as client:
        model = tether.AnthropicModel(
            "claude-sonnet-4-6",
            client=client,
            max_tokens=2048,
            thinking={"type": "enabled", "budget_tokens": 1024},
        )
        async with Supervisor(tether.FileStore(store), model=model, tools=tools) as sup:
            with contextlib.suppress(tether.RunExistsError):
                await sup.start("run-1", "Tell Dana.")
            status = await sup.wait("run-1", timeout=30)
    api.assert_all_answered()
    assert status is tether.RunStatus.DONE, status
    lines = sent.read_text().splitlines()
    print(f"done sent={lines!r} requests={api.calls}")


if __name__ == "__main__":
    anyio.run(main, pathlib.Path(sys.argv[1]))
