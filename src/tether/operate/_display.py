"""What the command line and the console share to show runs to a person: the words and
formats (ages, times, JSON), who holds a run, the cached listing of a store's summaries, and
the summary of a run that cannot be read.
"""

from __future__ import annotations

from ._acknowledge import retry_details as retry_details
from ._acknowledge import unfoldable as unfoldable
from ._describe import as_json as as_json
from ._describe import event_type as event_type
from ._describe import format_age as format_age
from ._describe import format_time as format_time
from ._describe import printable as printable
from ._describe import shorten as shorten
from ._describe import visible as visible
from ._holders import held_by as held_by
from ._holders import holder_of as holder_of
from ._listing import RACY_NS as RACY_NS
from ._listing import Listing as Listing
from ._summary import by_status as by_status
from ._summary import has_children as has_children
from ._summary import parked_action as parked_action
from ._summary import unreadable as unreadable
