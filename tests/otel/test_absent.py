"""Without ``telemetry=``, tracing costs nothing: not even an import of OpenTelemetry."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

PROGRAM = """
import sys, anyio, tether
from tests.otel._agent import RUN, app

async def main(root):
    model, tools = app(root / "desk.jsonl")
    async with tether.Supervisor(tether.FileStore(root / "store"), model=model, tools=tools) as sup:
        await sup.start(RUN, "Help with K-1.")
        print((await sup.wait(RUN, timeout=30)).value)

from pathlib import Path
anyio.run(main, Path(sys.argv[1]))
print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))
"""


def test_an_untraced_run_never_imports_opentelemetry(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["done", "[]"]
