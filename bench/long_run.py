"""Per-step runtime cost in a long run: a step at step 5,000 next to one at step 100.

Run ``python bench/long_run.py [--steps 5000] [--out FILE]``.

One run of a model whose cost does not grow with the conversation (it answers from
``len(messages)`` alone) calls a ``rerun`` tool at every step. Syncs are switched off (the
``FileOps`` seam, so not durable) so that what is timed is the runtime's own work: folding,
status, the replay decision, framing, the copies it makes for the model. The target: a step
near the end costs at most 1.2 times a step near the start (each window is the median step
time of 50 consecutive steps; the whole run is repeated and the median ratio reported).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from _harness import parser, write_results
from _machine import machine_info
from _nosync import NoSyncOps

import tether
from tether.models import Message, ModelReply, ScriptedModel, SystemPrompt, ToolDefinition

WINDOW = 50


class ConstantModel:
    """Answers a tool call at every step from the conversation's length: O(1) per call.

    It timestamps each call, so a step's time is the time between two model calls.
    """

    name = "constant"
    params: dict[str, Any] = {}  # noqa: RUF012 - a fixed, empty parameter set

    def __init__(self, steps: int) -> None:
        self.steps = steps
        self.stamps: list[float] = []

    async def __call__(
        self, *, system: SystemPrompt, messages: list[Message], tools: list[ToolDefinition]
    ) -> ModelReply:
        self.stamps.append(time.perf_counter())
        step = len(messages) // 2
        if step >= self.steps:
            return ModelReply(content=[{"type": "text", "text": "done"}])
        block = ScriptedModel.tool_use(f"toolu_{step}", "step", {"n": step})
        return ModelReply(content=[block])


async def one_run(root: Path, steps: int) -> list[float]:
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun")
    async def step(n: int) -> int:
        """One step."""
        return n

    model = ConstantModel(steps)
    store = tether.FileStore(root, redact=None, file_ops=NoSyncOps())
    async with tether.Supervisor(store, model=model, tools=tools) as sup:
        await sup.start("run-long", "go", budgets=tether.Budgets(max_model_calls=None))
        status = await sup.wait("run-long", timeout=3600)
        assert status is tether.RunStatus.DONE, status
    return [b - a for a, b in zip(model.stamps, model.stamps[1:], strict=False)]


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__, out="long_run.json")
    p.add_argument("--steps", type=int, default=5000, help="steps of the run")
    p.add_argument("--repeat", type=int, default=3, help="runs, the median ratio reported")
    args = p.parse_args(argv)
    early_at, late_at = 100, args.steps - WINDOW
    ratios, early_ms, late_ms = [], [], []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="tether-long-run-") as tmp:
            times = anyio.run(one_run, Path(tmp), args.steps)
        early = statistics.median(times[early_at : early_at + WINDOW])
        late = statistics.median(times[late_at : late_at + WINDOW])
        early_ms.append(early * 1000)
        late_ms.append(late * 1000)
        ratios.append(late / early)
    ratio = statistics.median(ratios)
    verdict = "met" if ratio <= 1.2 else "MISSED"
    print(
        f"step {early_at}: {statistics.median(early_ms):.3f} ms, step {late_at}: "
        f"{statistics.median(late_ms):.3f} ms, ratio {ratio:.2f} (target <= 1.2: {verdict}); "
        f"ratios of the {args.repeat} runs: {', '.join(f'{r:.2f}' for r in ratios)}"
    )
    report = {
        "machine": machine_info(Path(tempfile.gettempdir())),
        "steps": args.steps,
        "early_step": early_at,
        "late_step": late_at,
        "early_ms": early_ms,
        "late_ms": late_ms,
        "ratios": ratios,
        "ratio": ratio,
    }
    write_results(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
