"""``python -m tests.supervisor._openai_child ROOT``: a run on ``OpenAIModel`` (the Responses
API, ``store=False`` with encrypted reasoning) against a fresh strict fake in each process.

The first process (no store yet) starts the run: the server, which numbers its calls per turn,
answers ``call_0`` twice; the first refund runs, the second (a large one) needs approval. The
process prints ``parked ["<call id>"]`` and waits to be killed. A later process resumes the
run once the approval is recorded, runs the refund and prints ``done refunds=[...]
requests=N rejections=M``; its fake checks that the reasoning items and calls journaled by the
first process come back as the API issued and paired them.
"""

from __future__ import annotations

import contextlib
import json
import pathlib
import sys

import anyio

import tether
from tether.supervisor import Supervisor

from ..models._responses_api import ResponsesAPI, answer, function_call, reasoning


async def main(root: pathlib.Path) -> None:
    ledger = root / "refunds"
    store = root / "store"
    resuming = store.exists()
    if resuming:
        api = ResponsesAPI(answer("Both orders are refunded."))
    else:
        api = ResponsesAPI(
            answer(
                reasoning("Refund o-1 first."), function_call("call_0", "refund", {"order": "o-1"})
            ),
            answer(
                reasoning("o-2 is large: it needs a person."),
                function_call("call_0", "refund_large", {"order": "o-2"}),
            ),
        )
    tools = tether.ToolRegistry()

    def record(order: str, key: str) -> str:
        with ledger.open("a") as f:
            f.write(f"{order} {key}\n")
        return f"refunded {order}"

    @tools.tool(policy="idempotency_key")
    async def refund(order: str, ctx: tether.ToolContext) -> str:
        """Refund an order."""
        return record(order, ctx.idempotency_key)

    @tools.tool(policy="idempotency_key", approval=True)
    async def refund_large(order: str, ctx: tether.ToolContext) -> str:
        """Refund a large order (a person approves)."""
        return record(order, ctx.idempotency_key)

    async with api.client() as client:
        model = tether.OpenAIModel(
            "gpt-5-mini",
            client=client,
            api="responses",
            store=False,
            include=["reasoning.encrypted_content"],
        )
        async with Supervisor(tether.FileStore(store), model=model, tools=tools) as sup:
            with contextlib.suppress(tether.RunExistsError):
                await sup.start("run-1", "Refund o-1 and o-2.", system="You are Kitebase billing.")
            status = await sup.wait("run-1", timeout=30)
            if status is tether.RunStatus.WAITING_FOR_APPROVAL:
                view = await sup.inspect("run-1")
                print(f"parked {json.dumps(list(view.pending))}", flush=True)
                await anyio.sleep_forever()  # until the parent kills this process
    api.assert_all_answered()
    assert status is tether.RunStatus.DONE, status
    refunds = ledger.read_text().splitlines()
    print(f"done refunds={refunds!r} requests={api.calls} rejections={len(api.rejections)}")


if __name__ == "__main__":
    anyio.run(main, pathlib.Path(sys.argv[1]))
