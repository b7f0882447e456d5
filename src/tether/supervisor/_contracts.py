"""Contracts across processes: what a run's manifest pinned against what an application
offers (``contract_changes``), and what each live worker advertises it can continue
(``contracts_for``, ``Advertising``). ``tether check``, ``tether repin``, the console's repin
and the rolling-deploy rule all read contracts here.
"""

from __future__ import annotations

from ._fleet import Advertising as Advertising
from ._fleet import Contracts as Contracts
from ._fleet import contracts_for as contracts_for
from ._fleet import decode_contracts as decode_contracts
from ._manifest import CONTRACT as CONTRACT
from ._manifest import Change as Change
from ._manifest import contract_changes as contract_changes
