"""Run ids: validated so that one can never be a path out of the store's root."""

from __future__ import annotations

import re

from .._errors import InvalidRunIdError
from ._format import MAX_RUN_ID_LEN

_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def check_run_id(run_id: object) -> str:
    """Return ``run_id`` if it is a valid run id.

    Valid: 1 to 128 characters, letters, digits and ``._-``, starting with a letter or digit
    (so never ``.``, ``..`` or a hidden file).

    Raises:
        InvalidRunIdError: naming the id and what is wrong with it.
    """
    if not isinstance(run_id, str):
        raise InvalidRunIdError(repr(run_id), "a run id must be a string")
    if not run_id:
        raise InvalidRunIdError(run_id, "empty")
    if len(run_id) > MAX_RUN_ID_LEN:
        raise InvalidRunIdError(run_id, f"longer than {MAX_RUN_ID_LEN} characters")
    if not _RUN_ID.fullmatch(run_id):
        raise InvalidRunIdError(
            run_id, "use letters, digits and ._- only, starting with a letter or digit"
        )
    return run_id
