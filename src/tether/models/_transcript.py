"""What ``ScriptedModel`` keeps of the conversations it answers, so that a call costs the same
near message 10,000 as near message 10.

A call needs three things of the conversation: how many assistant messages it holds (which
picks the answer), its size as compact JSON (the default usage estimate), and, for a script
function, a copy it may read but that cannot reach the run's own messages. Computed afresh,
each is a walk over every message at every call, and the copy also allocates the whole
conversation again (which the cyclic garbage collector then walks). Here each message is
looked at once, when a call first sees it: its copy is read-only (``FrozenDict``,
``FrozenList``), so one copy serves every later call without any of them being able to change
what the next one sees; its size and role are remembered beside it. The runtime freezes a
run's messages in place for a model that keeps them (``freeze_conversation``, the ``Model``
protocol's ``frozen_messages``): a message that is read-only already is kept as it is, so the
run and the model share one copy of the conversation.

A conversation is known by the identity of its messages: the runtime appends to a run's
messages and never changes one it has passed to a model (the ``Model`` protocol forbids the
model to, and a run's messages are folded from its journal), so a call whose list starts with
the messages of an earlier call only has the rest to look at. A list that differs anywhere is
looked at again from the first message that differs. What is kept of a conversation goes once
its answer ends the turn (no tool call: a run's conversation goes on only when a person or the
runtime adds to it), and at most ``LIMIT`` conversations are kept, the least recently used
going first, so a process that answers many runs holds a bounded amount.
"""

from __future__ import annotations

import copy
import operator
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any, NoReturn, final

import msgspec

from ._messages import Message

LIMIT = 1024
"""Conversations kept at once (the least recently used goes first)."""

_FROZEN = (
    "ScriptedModel gives a script function read-only messages; "
    "copy one to change it (copy.deepcopy gives plain dicts and lists)"
)


def _refuse(*_: object, **__: object) -> NoReturn:
    raise TypeError(_FROZEN)


@final
class FrozenDict(dict[str, Any]):
    """A ``dict`` that refuses every change (a message, or a block of one, as a script sees it).

    It is a real ``dict``: ``isinstance``, ``json.dumps``, ``==`` and ``dict(d)`` work as usual.
    ``copy.copy`` and ``copy.deepcopy`` give plain, changeable ones.
    """

    __slots__ = ()
    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __copy__(self) -> dict[str, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return {k: thaw(v) for k, v in self.items()}

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        return (dict, (thaw(self),))


@final
class FrozenList(list[Any]):
    """A ``list`` that refuses every change (see ``FrozenDict``)."""

    __slots__ = ()
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse
    append = extend = insert = pop = remove = clear = sort = reverse = _refuse

    def __copy__(self) -> list[Any]:
        return list(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> list[Any]:
        return [thaw(v) for v in self]

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        return (list, (thaw(self),))


_SCALARS = (str, int, float, bool, type(None))
_SCALAR_TYPES = frozenset(_SCALARS)
_set_item = dict.__setitem__


def freeze(value: Any) -> Any:
    """A read-only deep copy of a JSON-like ``value``: dicts and lists (and tuples) become
    ``FrozenDict`` and ``FrozenList``; strings, numbers, booleans and ``None`` are shared (they
    cannot change); anything else is deep-copied (``copy.deepcopy``)."""
    # Every message a conversation adds goes through here once. A plain dict or list (nearly
    # every value) is copied whole by the C constructor, then only its values that are not
    # scalars of the exact JSON types are replaced by their frozen copies: a third less time
    # than filling an empty one key by key.
    kind = type(value)
    if kind is dict:
        frozen = FrozenDict(value)
        for k, v in value.items():
            if type(v) not in _SCALAR_TYPES:
                _set_item(frozen, k, freeze(v))
        return frozen
    if kind is list:
        return FrozenList([v if type(v) in _SCALAR_TYPES else freeze(v) for v in value])
    if kind in _SCALAR_TYPES:
        return value
    if isinstance(value, dict):  # a subclass (a FrozenDict, an OrderedDict): a plain copy
        return freeze(dict(value))
    if isinstance(value, list | tuple):
        return FrozenList([v if type(v) in _SCALAR_TYPES else freeze(v) for v in value])
    if isinstance(value, _SCALARS):  # a subclass of one (an enum member of str, say)
        return value
    return copy.deepcopy(value)


def freeze_conversation(messages: list[Message]) -> None:
    """Replace each message at the end of ``messages`` that is not read-only yet by its
    read-only copy (``freeze``), in place, back to the last one that is.

    The runtime does this to a run's own messages before it calls a model that keeps them
    (``frozen_messages``): one read-only copy then serves the run and the model, where the
    model would otherwise keep a copy of its own of every message. Messages are only ever
    appended, so each is frozen once.
    """
    first = len(messages)
    while first and type(messages[first - 1]) is not FrozenDict:
        first -= 1
    for i in range(first, len(messages)):
        messages[i] = freeze(messages[i])


def thaw(value: Any) -> Any:
    """A plain, changeable deep copy of what ``freeze`` made."""
    if isinstance(value, dict):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, list):
        return [thaw(v) for v in value]
    return value


def _type_name(obj: object) -> str:
    return type(obj).__name__


# For token estimates only: sorted keys, so the same value gives the same size in every
# process; anything that is not JSON counts as its type's name (unlike a repr holding an object
# id, the same everywhere).
_SIZE_ENCODER = msgspec.json.Encoder(order="sorted", enc_hook=_type_name)


def json_size(value: object) -> int:
    """Characters of ``value`` as compact JSON with sorted keys."""
    data = _SIZE_ENCODER.encode(value)
    return len(data) if data.isascii() else len(data.decode())


# ``{"messages":[m1,m2],"system":S,"tools":T}``: what a request costs besides its parts.
_REQUEST_FRAME = len('{"messages":[') + len('],"system":') + len(',"tools":') + len("}")


def request_size(messages_size: int, count: int, system: object, tools_size: int) -> int:
    """``json_size({"system": system, "messages": messages, "tools": tools})``, given the sum of
    the messages' own sizes, how many there are, and the size of ``tools`` (``ToolsSize``)."""
    commas = max(0, count - 1)
    return _REQUEST_FRAME + messages_size + commas + json_size(system) + tools_size


@final
class ToolsSize:
    """``json_size`` of a call's tool definitions, kept for the definitions last seen.

    The runtime hands every call of a run (and every run pinned to the same tools) the same
    definition objects, in a new list each time, and never changes them (nor may a model,
    see ``Model``): a list holding the very objects of the last one has their size. As with
    messages, a caller who changes a definition in place after a call must pass a new one
    for the estimate to see it. Anything but a list is sized at every call.
    """

    __slots__ = ("_kept",)

    def __init__(self) -> None:
        self._kept: tuple[list[object], int] = ([], json_size([]))

    def __call__(self, tools: list[Any]) -> int:
        if type(tools) is not list:
            return json_size(tools)
        kept, size = self._kept  # one read: a call elsewhere replaces both at once
        if len(kept) != len(tools) or not all(map(operator.is_, kept, tools)):
            size = json_size(tools)
            self._kept = (list(tools), size)
        return size


@final
class Transcript:
    """One conversation as seen so far: its messages (the caller's), their read-only versions
    (the messages themselves where the runtime froze them, ``freeze_conversation``; none kept
    where no copies are wanted), sizes and roles, with running totals."""

    __slots__ = ("assistants", "copies", "frozen", "originals", "roles", "size", "sizes")

    def __init__(self, *, copies: bool = True) -> None:
        self.copies = copies
        self.originals: list[Message] = []
        self.frozen: list[Message] = []  # read-only (FrozenDict), typed as what they stand for
        self.sizes: list[int] = []
        self.roles: list[bool] = []  # whether each message is the assistant's
        self.size = 0
        self.assistants = 0

    def catch_up(self, messages: list[Message]) -> None:
        """Make this the transcript of ``messages``: keep the longest prefix it shares with
        them (by identity), look at the rest."""
        kept = _shared_prefix(self.originals, messages)
        if kept < len(self.originals):
            self.size -= sum(self.sizes[kept:])
            self.assistants -= sum(self.roles[kept:])
            for column in (self.originals, self.frozen, self.sizes, self.roles):
                del column[kept:]
        self._add(messages[kept:])

    def _add(self, messages: Iterable[Message]) -> None:
        for message in messages:
            size = json_size(message)
            assistant = isinstance(message, dict) and message.get("role") == "assistant"
            self.originals.append(message)
            if self.copies:
                # A message the runtime froze (``freeze_conversation``) is read-only already:
                # it is shared, not copied again.
                shared = type(message) is FrozenDict
                self.frozen.append(message if shared else freeze(message))
            self.sizes.append(size)
            self.roles.append(assistant)
            self.size += size
            self.assistants += assistant


def _shared_prefix(seen: list[Message], messages: list[Message]) -> int:
    n = min(len(seen), len(messages))
    if n and seen[n - 1] is messages[n - 1] and all(map(operator.is_, seen, messages)):
        return n  # the common case: the conversation only grew
    for i in range(n):
        if seen[i] is not messages[i]:
            return i
    return n


@final
class Transcripts:
    """The transcripts of the conversations recently answered, by their first message; with
    ``copies``, each keeps a read-only copy of its messages (``Transcript.frozen``)."""

    def __init__(self, limit: int = LIMIT, *, copies: bool = True) -> None:
        self._limit = limit
        self._copies = copies
        self._kept: OrderedDict[int, Transcript] = OrderedDict()

    def __len__(self) -> int:
        return len(self._kept)

    def of(self, messages: list[Message]) -> Transcript:
        """The transcript of ``messages``, brought up to date (a new one for an unknown
        conversation)."""
        if not messages:
            return Transcript(copies=self._copies)
        key = id(messages[0])
        transcript = self._kept.get(key)
        if (
            transcript is None
            or not transcript.originals
            or transcript.originals[0] is not (messages[0])
        ):
            transcript = Transcript(copies=self._copies)
            self._kept[key] = transcript
            while len(self._kept) > self._limit:
                self._kept.popitem(last=False)
        else:
            self._kept.move_to_end(key)
        transcript.catch_up(messages)
        return transcript

    def forget(self, messages: list[Message]) -> None:
        """Drop what is kept of the conversation ``messages`` belongs to."""
        if messages:
            transcript = self._kept.get(id(messages[0]))
            if transcript is not None and transcript.originals[0] is messages[0]:
                del self._kept[id(messages[0])]
