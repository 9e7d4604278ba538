"""A batch's served windows laid out flat as message ids, for the audit of
:mod:`~contextledger.window.audit_batch`.

Every message object of a run (a policy's rewrites included) gets one id and one row of
properties (:data:`PROPERTIES`); every window a replay serves, or the stateless
frameworks' policies compute for the whole batch, becomes the run of ids of its messages.
The audit then measures every window at once over these arrays.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from contextledger.read.jsjson import utf16_length
from contextledger.read.messages import Message, RunMessages
from contextledger.window import segments
from contextledger.window.audit import RunFacts
from contextledger.window.cache_costs import rewritten_wire_key, wire_key
from contextledger.window.frameworks._common import rewritten
from contextledger.window.frameworks.mastra import calls_removed
from contextledger.window.refusals import is_result
from contextledger.window.replay import window_key

_EDITS = {None: 0, "placeholder": 1, "preview": 2, "summary": 3}


#: Per message, in :attr:`Layout.properties`: its chars, role (0 other, 1 system, 2 user,
#: 3 tool), the call id it answers, whether that id is given, whether it is a result kept
#: verbatim, a fact among those, its edit, what a cache compares (``wire_key``) and what
#: ``same_window`` compares (``window_key``), interned, and how many calls it makes.
PROPERTIES = (
    "chars",
    "role",
    "answers",
    "answers_given",
    "verbatim",
    "fact",
    "edit",
    "wire",
    "sent_key",
    "call_count",
)
_ROLES = {"system": 1, "user": 2, "tool": 3}


@dataclass
class Layout:
    """Every message object met in the batch's windows (an id each) and its properties;
    each call's window as a span of those ids; per call of a run, the window the run sent
    there, its current request and the tokens the provider counted."""

    facts: list[RunFacts] = field(default_factory=list)
    streams: list[RunMessages] = field(default_factory=list)
    messages: list[Message | None] = field(default_factory=list)  # None: a rewrite unbuilt
    properties: list[int] = field(default_factory=list)  # PROPERTIES of each, in a row
    call_ids: list[int] = field(default_factory=list)  # the calls each message makes, flat
    # per distinct window of a run (by the list served): its message ids, laid end to end
    flat: list[int] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    # per call's window (a row)
    window_of_row: list[int] = field(default_factory=list)
    replay_of_row: list[int] = field(default_factory=list)
    call_of_row: list[int] = field(default_factory=list)
    # per replay
    run_of_replay: list[int] = field(default_factory=list)
    # per run, and per call of the batch's runs, in order
    first_call: list[int] = field(default_factory=list)
    sent_flat: list[int] = field(default_factory=list)
    sent_lengths: list[int] = field(default_factory=list)
    request: list[int] = field(default_factory=list)
    input_tokens: list[int] = field(default_factory=list)
    # call ids interned; the run's keys interned, message ids by object, windows by list
    call_numbers: dict[str | None, int] = field(default_factory=dict)
    _keys: dict[Any, int] = field(default_factory=dict)
    _ids: dict[Message, int] = field(default_factory=dict)  # (a message hashes by identity)
    _lists: dict[int, tuple[Sequence[Message], int]] = field(default_factory=dict)
    _rewrites: dict[tuple[Message, str, str | None, bool], int] = field(default_factory=dict)
    _unbuilt: dict[int, tuple[Message, str, str | None, bool]] = field(default_factory=dict)

    def start_run(self, stream: RunMessages, facts: RunFacts) -> None:
        self.streams.append(stream)
        self.facts.append(facts)
        self._ids, self._lists, self._keys, self._rewrites = {}, {}, {}, {}
        numbered = [self.message_id(message) for message in stream.messages]
        self.first_call.append(len(self.input_tokens))
        for call, request in zip(stream.calls, facts.requests, strict=True):
            # the window the call was sent: stream messages, so ids by their index
            self.sent_flat += map(numbered.__getitem__, call.window_served)
            self.sent_lengths.append(len(call.window_served))
            self.request.append(-1 if request is None else self.message_id(request))
            self.input_tokens.append(call.input_tokens)

    def end_run(self) -> None:
        self._ids, self._lists, self._keys, self._rewrites = {}, {}, {}, {}

    def add_replay(self, served: Sequence[Sequence[Message]]) -> int:
        """Lay out one replay's windows (one per call of the current run); its number."""
        run = len(self.streams) - 1
        stream = self.streams[run]
        if len(served) != len(stream.calls):
            msg = f"{stream.run_id}: {len(served)} windows for {len(stream.calls)} model calls"
            raise ValueError(msg)
        replay = len(self.run_of_replay)
        self.run_of_replay.append(run)
        self.window_of_row += map(self._window, served)
        self.replay_of_row += [replay] * len(served)
        self.call_of_row += range(len(served))
        return replay

    def add_windows(self, flat: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Lay out windows (``lengths[n]`` ids of ``flat`` each, no replay's yet); their
        numbers."""
        window = len(self.lengths)
        self.flat += flat.tolist()
        self.lengths += lengths.tolist()
        return np.arange(window, window + len(lengths))

    def add_ranges(
        self,
        served: tuple[np.ndarray, np.ndarray],
        histories: tuple[np.ndarray, np.ndarray, np.ndarray],
        calls: Sequence[int],
        runs: np.ndarray,
    ) -> np.ndarray:
        """Lay out one replay of each run of the batch where ``runs`` holds (once every run
        is started), a window each call (``served``: every run's, ids laid end to end, and
        their lengths), ``calls`` a run; the replay of each run (-1: not laid out). A
        window that is the call's whole history, id for id, is the history's
        (``histories``: as ``served``, and their numbers from :meth:`add_windows`): laid
        out once for every policy that serves it, as the replays' shared lists are."""
        flat, lengths = served
        history_flat, history_lengths, history_windows = histories
        counts = np.asarray(calls, dtype=np.int64)
        taken = np.repeat(runs, counts)  # per row
        flat, lengths = flat[np.repeat(taken, lengths)], lengths[taken]
        history_flat = history_flat[np.repeat(taken, history_lengths)]
        history_lengths, history_windows = history_lengths[taken], history_windows[taken]
        starts = np.cumsum(lengths) - lengths
        history_starts = np.cumsum(history_lengths) - history_lengths
        alike = np.flatnonzero(lengths == history_lengths)
        differ = segments.pairs_differ(
            np.concatenate([flat, history_flat]),
            starts[alike],
            history_starts[alike] + len(flat),
            lengths[alike],
        )
        whole = np.zeros(len(lengths), dtype=bool)
        whole[alike] = differ == lengths[alike]
        own = self.add_windows(flat[np.repeat(~whole, lengths)], lengths[~whole])
        window = np.empty(len(lengths), dtype=np.int64)
        window[whole], window[~whole] = history_windows[whole], own
        laid = np.flatnonzero(runs)
        replay = np.full(len(runs), -1, dtype=np.int64)
        replay[laid] = np.arange(len(laid)) + len(self.run_of_replay)
        self.run_of_replay += laid.tolist()
        self.window_of_row += window.tolist()
        self.replay_of_row += np.repeat(replay[laid], counts[laid]).tolist()
        self.call_of_row += segments.spans(counts[laid])[1].tolist()
        return replay

    def _window(self, window: Sequence[Message]) -> int:
        """The number of ``window`` (a list several calls or policies may serve)."""
        held = self._lists.get(id(window))
        if held is not None:
            return held[1]
        try:
            ids = list(map(self._ids.__getitem__, window))
        except KeyError:  # messages a policy wrote: numbered as they are met
            known, number_of = self._ids.get, self.message_id
            ids = [n if (n := known(m)) is not None else number_of(m) for m in window]
        number = len(self.lengths)
        self.flat += ids
        self.lengths.append(len(ids))
        self._lists[id(window)] = (window, number)  # the window held: its id stays its own
        return number

    def message_id(self, message: Message) -> int:
        """The id of ``message`` (a message of the current run's windows), numbered when
        first met."""
        found = self._ids.get(message)
        if found is not None:
            return found
        number = self._ids[message] = len(self.messages)
        self.messages.append(message)
        call_id = message.tool_call_id
        verbatim = bool(call_id) and is_result(message) and not message.edit
        fact = verbatim and self.facts[-1].final.get(call_id or "") == "fact"
        keys = self._keys
        wire = keys.setdefault(wire_key(message), len(keys))
        sent = keys.setdefault(("sent", window_key(message)), len(keys))
        calls = self.call_numbers
        self.properties += (
            message.chars,
            _ROLES.get(message.role, 0),
            calls.setdefault(call_id, len(calls)),
            bool(call_id),
            verbatim,
            fact,
            _EDITS.get(message.edit, 0),
            wire,
            sent,
            len(message.tool_calls),
        )
        for call in message.tool_calls:
            self.call_ids.append(calls.setdefault(call.id, len(calls)))
        return number

    def rewrite_id(
        self, message: Message, content: str, edit: str | None, *, calls_kept: bool = True
    ) -> int:
        """The id of ``rewritten(message, content, edit)`` (a result cleared, or a notice
        from a template), or with ``calls_kept`` False of ``message`` without its calls
        (Mastra's filter: ``content`` its own), its properties those of ``message`` with
        the content, edit and calls replaced; the copy is built only if a row names it
        (:meth:`message`)."""
        key = (message, content, edit, calls_kept)
        found = self._rewrites.get(key)
        if found is not None:
            return found
        base = self.message_id(message) * len(PROPERTIES)
        row = self.properties[base : base + len(PROPERTIES)]
        number = self._rewrites[key] = len(self.messages)
        self.messages.append(None)
        self._unbuilt[number] = key
        # a copy keeps the original's stored length unless its content is new (rewritten)
        chars = utf16_length(content) if calls_kept else message.chars
        keys = self._keys
        tool_calls = message.tool_calls if calls_kept else ()
        row[0] = chars
        verbatim = row[3] and is_result(message) and not edit  # (row[3]: a call id given)
        row[4] = verbatim
        row[5] = verbatim and self.facts[-1].final.get(message.tool_call_id or "") == "fact"
        row[6] = _EDITS.get(edit, 0)
        wire = rewritten_wire_key(message, content, chars, edit, tool_calls)
        row[7] = keys.setdefault(wire, len(keys))
        if message.window_authored:  # window_key: an authored message is its text
            row[8] = keys.setdefault(("sent", ("authored", content)), len(keys))
        row[9] = len(tool_calls)
        self.properties += row
        calls = self.call_numbers
        for call in tool_calls:
            self.call_ids.append(calls.setdefault(call.id, len(calls)))
        return number

    def message(self, number: int) -> Message:
        """The message of id ``number`` (a rewrite built now: the same copy the policy's
        own replay makes)."""
        found = self.messages[number]
        if found is None:
            message, content, edit, calls_kept = self._unbuilt.pop(number)
            found = self.messages[number] = (
                rewritten(message, content, edit)
                if calls_kept
                else calls_removed(message, frozenset(call.id for call in message.tool_calls))
            )
        return found

    def columns(self) -> dict[str, np.ndarray]:
        """:data:`PROPERTIES` of every message, a column each."""
        table = np.asarray(self.properties, dtype=np.int64).reshape(-1, len(PROPERTIES))
        return {name: table[:, n] for n, name in enumerate(PROPERTIES)}
