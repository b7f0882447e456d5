"""The worker application of the browser test: the operator tests' model and tools, so that a
``tether worker`` can finish the runs ``tests.cli._stores.Env`` parks."""

from __future__ import annotations

import os
import pathlib

from tether.supervisor import WorkerApp

from ..cli._stores import Env


def app() -> WorkerApp:
    env = Env(pathlib.Path(os.environ["TETHER_TEST_ROOT"]))
    return WorkerApp(model=env.model(), tools=env.tools(), options={"sweep_interval": 0.2})
