"""The framework versions an integration supports, checked when it is imported.

An integration uses only a framework's public interfaces, but those change between releases
(pydantic-ai's capabilities, the Agents SDK's model interface). A version outside the range
the integration was built and tested against fails at import, naming what is installed and
what is supported, rather than a run misbehaving later.
"""

from __future__ import annotations

import re
from importlib import metadata

from .._errors import TetherError


class FrameworkVersionError(TetherError, ImportError):
    """The installed agent framework is missing, or outside the versions supported."""


def _numbers(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version.split("+")[0])[:3])


def require(distribution: str, module: str, *, minimum: str, below: str) -> str:
    """Check that ``distribution`` is installed at a version in ``[minimum, below)``.

    Args:
        distribution: the framework's package name on the index (``pydantic-ai-slim``).
        module: the integration's module, for the message.
        minimum: the lowest version supported.
        below: the first version no longer supported.

    Returns:
        The installed version.

    Raises:
        FrameworkVersionError: not installed, or outside the range; the message names both.
    """
    extra = module.rsplit(".", 1)[-1].replace("_", "-")
    try:
        installed = metadata.version(distribution)
    except metadata.PackageNotFoundError:
        raise FrameworkVersionError(
            f"{module} needs {distribution} (>={minimum},<{below}), which is not installed: "
            f"pip install 'tether[{extra}]'"
        ) from None
    if not _numbers(minimum) <= _numbers(installed) < _numbers(below):
        raise FrameworkVersionError(
            f"{module} supports {distribution} >={minimum},<{below}; {installed} is installed. "
            f"Install a supported version (pip install 'tether[{extra}]'), or a tether "
            "release that supports this one"
        )
    return installed
