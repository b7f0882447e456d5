"""Failpoints: the named places in the runtime where a test may stop the process on purpose.

The runtime calls ``failpoint(NAME)`` at each point below and owns nothing more than a hook,
``None`` by default: disarmed, a failpoint costs two global reads. What to do at a point is
the test kit's business (``tether.testing``): its killer ends the process with ``SIGKILL``,
armed for one process through the environment (``TETHER_CRASH_AT=NAME[:N]``, and
``TETHER_CRASH_TRACE=FILE`` to list the points passed). When either variable is set, the first
failpoint a process passes loads and validates it (``tether.testing._crashpoints``), so
``import tether`` never imports the test kit, and a process that sets neither never does at
all. The points (etcd's gofail failpoints work the same way):

``model_answered``   the model returned; its answer is not yet saved
``model_saved``      the model's answer (and its tool calls) is durable
``tool_started``     a ``tool_started`` record is durable; the tool has not run
``tool_returned``    the tool ran (its side effect happened); its result is not yet saved
``result_saved``     the tool's result is durable
``parked``           the run parked (waiting for a person); its journal is closed
``inbox_folded``     answers queued in the run's inbox are durable in its journal; the inbox
                     is not yet cleared
``contract_taken``   the run goes on under a contract it was not driven on before: the
                     ``repinned`` record of a compatible change this process took over, or
                     the ``retried`` record that sends on a run parked for its contract, is
                     durable; the run's next step has not started
"""

from __future__ import annotations

import os
from collections.abc import Callable

POINTS: tuple[str, ...] = (
    "model_answered",
    "model_saved",
    "tool_started",
    "tool_returned",
    "result_saved",
    "parked",
    "inbox_folded",
    "contract_taken",
    "gc_set_aside",
)
"""Every failpoint the runtime passes."""

ENVIRONMENT = ("TETHER_CRASH_AT", "TETHER_CRASH_TRACE")
"""The variables that arm the test kit's killer for a process."""

Hook = Callable[[str], None]

_hook: Hook | None = None
_looked = False


def failpoint(name: str) -> None:
    """Pass failpoint ``name``: call the hook, if one is armed."""
    hook = _hook
    if hook is not None:
        hook(name)
    elif not _looked:
        _arm_from_environment()
        if _hook is not None:
            _hook(name)


def set_hook(hook: Hook | None) -> Hook | None:
    """Arm ``hook`` for every failpoint from now on (``None`` disarms); returns the last one."""
    global _hook, _looked
    previous, _hook, _looked = _hook, hook, True
    return previous


def _arm_from_environment() -> None:
    global _looked
    _looked = True
    if any(os.environ.get(var) for var in ENVIRONMENT):
        from .testing._crashpoints import killer_from_environment

        set_hook(killer_from_environment())
