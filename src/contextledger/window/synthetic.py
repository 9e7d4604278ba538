"""Synthetic runs: message streams built from a script, for tests, benches and ``synth``.

A script is what happened after each model call: parallel tool batches (a
result may be missing: an unanswered call), assistant text, user turns. The
stream is what :func:`~contextledger.read.messages.rebuild_messages` would
fold out of such a run recorded without a window; the provider's input tokens
are the mock's estimate (``ceil(chars / 4)``).

At scale, :class:`Scripts` holds many runs' scripts as flat arrays (one row per
tool call) and :func:`script_streams` builds their streams and the standings
their findings ledgers would hold; :func:`tool_batches` draws the what-if bench's
runs, and ``contextledger synth`` draws the scripts of its runs from their tables.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from contextledger.read.messages import Message, ModelCall, RunMessages, ToolCall


@dataclass(frozen=True)
class Result:
    """One call of a parallel batch: its tool, its result's size (None: never answered),
    and whether the result carries the tool's name."""

    tool: str
    chars: int | None
    named: bool = True


@dataclass(frozen=True)
class Batch:
    """An assistant message calling tools in parallel (with ``text``, if it said
    anything), and the results that came back."""

    results: tuple[Result, ...]
    text: str = ""


@dataclass(frozen=True)
class Said:
    """A message with text: a user turn, or assistant text."""

    role: str
    text: str


Entry = Batch | Said


def build_stream(
    run_id: str,
    opening: Sequence[Said],
    steps: Sequence[Sequence[Entry]],
    *,
    request: str | None = None,
) -> RunMessages:
    """The stream of a run that opened with ``opening`` and, after call ``k``, appended
    ``steps[k-1]``; it makes ``len(steps)`` calls (the last step is what came after the
    last call, and is never served).

    >>> stream = build_stream("r", [Said("user", "go")], [[Batch((Result("look", 9),))], []])
    >>> [(m.role, m.first_call) for m in stream.messages], len(stream.calls)
    ([('user', 1), ('assistant', 2), ('tool', 2)], 2)
    """
    messages: list[Message] = []
    call_count = len(steps)

    def add(
        role: str,
        content: str,
        after_call: int,
        origin: str,
        call_id: str | None = None,
        tool_calls: tuple[ToolCall, ...] = (),
        tool_name: str | None = None,
        resolved: str | None = None,
    ) -> None:
        first = after_call + 1 if after_call < call_count else None
        messages.append(
            Message(
                role,
                content,
                call_id,
                tool_calls,
                tool_name,
                index=len(messages),
                first_call=first,
                origin=origin,
                resolved_tool_name=resolved,
            )
        )

    for said in opening:
        add(said.role, said.text, 0, "seed#0")
    for step, entries in enumerate(steps, start=1):
        for number, entry in enumerate(entries):
            origin = f"tool-calls#{step}.{number}"
            if isinstance(entry, Said):
                add(entry.role, entry.text, step, origin)
                continue
            ids = [f"c{step}.{number}.{i}" for i in range(len(entry.results))]
            asked = tuple(ToolCall(i, r.tool) for i, r in zip(ids, entry.results, strict=True))
            add("assistant", entry.text, step, origin, tool_calls=asked)
            for call_id, result in zip(ids, entry.results, strict=True):
                if result.chars is None:
                    continue
                name = result.tool if result.named else None
                add("tool", "x" * result.chars, step, origin, call_id, (), name, result.tool)
    calls = []
    # Messages enter in call order (those after the last call last): each call is
    # served a prefix of the stream.
    firsts = [m.first_call for m in messages]
    served_count = chars = 0
    for ordinal in range(1, call_count + 1):
        while served_count < len(messages):
            first = firsts[served_count]
            if first is None or first > ordinal:
                break
            chars += messages[served_count].chars
            served_count += 1
        served = tuple(range(served_count))
        calls.append(
            ModelCall(
                ordinal=ordinal,
                iteration=ordinal,
                bundle_index=ordinal,
                runtime_stage_id=f"call-llm#{ordinal}",
                window_stage_id=f"compact#{ordinal}",
                input_tokens=math.ceil(chars / 4),
                window_seen=served,
                window_served=served,
            )
        )
    if request is None:
        request = next((s.text for s in reversed(opening) if s.role == "user"), None)
    return RunMessages(
        run_id=run_id,
        user_message=request,
        messages=messages,
        calls=calls,
        final_window=tuple(m.index for m in messages),
        recorded_records=[],
    )


# ── many runs at once ──────────────────────────────────────────────
#: Standings a synthetic tool result is given, and how often (None: none declared).
STANDING_MIX: tuple[tuple[str | None, int], ...] = (
    ("fact", 20),
    ("noise", 45),
    ("open", 15),
    ("ruled-out", 5),
    (None, 15),
)
#: Text that synthetic messages are cut from (only its length matters, but for the
#: user's messages, which an archive stores).
_PROSE = (
    "Check the latest figures against last week's, list what changed and why, "
    "flag anything that looks wrong, and keep the answer short. Use the tools you "
    "have; ask before changing anything that cannot be undone. Report the numbers "
    "you relied on and where they came from, then say what you would do next. "
) * 8


def prose(length: int, start: int = 0) -> str:
    """``length`` characters of plain text, starting ``start`` characters in.

    >>> prose(14, 6)
    'the latest fig'
    """
    start %= len(_PROSE) // 2
    text = _PROSE[start : start + length]
    return text + "." * (length - len(text))


@dataclass
class Scripts:
    """Many synthetic runs' scripts as flat arrays: what :func:`script_streams` builds.

    Tool calls are one row each, ordered by run, then step (the call the batch
    followed, ``1 .. calls - 1``), then place in the batch. Said messages are one row
    each (ordered by run, then step): at a step, an assistant row is the text of the
    tool-calling message (or a message of its own where no tool was called), a user
    row follows the step's results; assistant rows at step ``calls`` are the answer,
    written after the last call and never served.
    """

    run_ids: list[str]
    requests: list[str]
    calls: np.ndarray  # [runs] model calls (at least 1)
    tool_names: Sequence[str]
    run: np.ndarray  # per tool call: its run's number
    step: np.ndarray
    tool: np.ndarray  # index into tool_names
    chars: np.ndarray  # its result's length; -1: never answered
    standing: np.ndarray  # index into STANDING_MIX
    #: per tool call: the result carries the tool's name (None: every one does)
    named: np.ndarray | None = None
    #: per run: its findings ledger holds the standings (None: every run's does)
    files_standings: np.ndarray | None = None
    #: per run: the provider reported input tokens (None: every run's did)
    tokens_reported: np.ndarray | None = None
    said_run: np.ndarray | None = None
    said_step: np.ndarray | None = None
    said_user: np.ndarray | None = None  # True: the user said it; False: the assistant
    said_chars: np.ndarray | None = None
    #: per said row: where its text starts in the prose (None: at its row number), kept
    #: by :meth:`take` so that a run's texts do not depend on the runs taken with it
    said_from: np.ndarray | None = None

    @property
    def runs(self) -> int:
        return len(self.run_ids)

    def position(self) -> np.ndarray:
        """Each tool call's place in its batch."""
        batch = self.run.astype(np.int64) * (int(self.calls.max(initial=1)) + 1) + self.step
        if batch.size == 0:
            return batch
        starts = np.flatnonzero(np.diff(batch, prepend=batch[0] - 1))
        return np.arange(batch.size) - np.repeat(starts, np.diff([*starts, batch.size]))

    def take(self, numbers: Sequence[int] | np.ndarray) -> Scripts:
        """The scripts of runs ``numbers`` (ascending), numbered from 0 in that order.

        >>> scripts = tool_batches(runs=5, calls=4)
        >>> part = scripts.take([1, 3])
        >>> part.run_ids, bool((part.chars == scripts.chars[scripts.run % 2 == 1]).all())
        (['syn-00001', 'syn-00003'], True)
        """
        chosen = np.asarray(numbers, dtype=np.int64)

        def per_run(values: np.ndarray | None) -> np.ndarray | None:
            return None if values is None else values[chosen]

        def rows(runs: np.ndarray | None) -> tuple[np.ndarray, np.ndarray] | None:
            if runs is None:
                return None
            kept = np.isin(runs, chosen)
            return kept, np.searchsorted(chosen, runs[kept])

        tools = rows(self.run)
        assert tools is not None
        said = rows(self.said_run)

        def tool_rows(values: np.ndarray | None) -> np.ndarray | None:
            return None if values is None else values[tools[0]]

        def said_rows(values: np.ndarray | None) -> np.ndarray | None:
            return None if values is None or said is None else values[said[0]]

        return Scripts(
            run_ids=[self.run_ids[n] for n in chosen.tolist()],
            requests=[self.requests[n] for n in chosen.tolist()],
            calls=self.calls[chosen],
            tool_names=self.tool_names,
            run=tools[1],
            step=self.step[tools[0]],
            tool=self.tool[tools[0]],
            chars=self.chars[tools[0]],
            standing=self.standing[tools[0]],
            named=tool_rows(self.named),
            files_standings=per_run(self.files_standings),
            tokens_reported=per_run(self.tokens_reported),
            said_run=None if said is None else said[1],
            said_step=said_rows(self.said_step),
            said_user=said_rows(self.said_user),
            said_chars=said_rows(self.said_chars),
            said_from=None if said is None else self.said_starts()[said[0]],
        )

    def said_starts(self) -> np.ndarray:
        """Where each said row's text starts in the prose."""
        if self.said_from is not None:
            return self.said_from
        return np.arange(0 if self.said_run is None else len(self.said_run))


def script_streams(
    scripts: Scripts, numbers: Sequence[int] | np.ndarray | None = None
) -> Iterator[tuple[RunMessages, list[dict[str, Any]]]]:
    """Each run's stream (``numbers``: these runs, in this order; default every run) and
    the ``schema.STANDINGS`` rows its findings ledger holds: each answered result's
    standing, declared by the call after the one that asked for it.

    >>> built = script_streams(tool_batches(runs=2, calls=3))
    >>> [(s.run_id, len(s.messages), len(s.calls), len(rows)) for s, rows in built]
    [('syn-00000', 6, 3, 3), ('syn-00001', 6, 3, 3)]
    """
    position = scripts.position().tolist()
    steps, tools = scripts.step.tolist(), scripts.tool.tolist()
    chars, standing = scripts.chars.tolist(), scripts.standing.tolist()
    named = scripts.named.tolist() if scripts.named is not None else None
    said: list[tuple[int, bool, int, int]] = []
    said_start = np.zeros(scripts.runs + 1, dtype=np.int64)
    if scripts.said_run is not None:
        assert scripts.said_step is not None and scripts.said_user is not None
        assert scripts.said_chars is not None
        said = list(
            zip(
                scripts.said_step.tolist(),
                scripts.said_user.tolist(),
                scripts.said_chars.tolist(),
                scripts.said_starts().tolist(),
                strict=True,
            )
        )
        said_start[1:] = np.cumsum(np.bincount(scripts.said_run, minlength=scripts.runs))
    tool_start = np.searchsorted(scripts.run, np.arange(scripts.runs + 1))
    calls = scripts.calls.tolist()
    chosen = range(scripts.runs) if numbers is None else numbers
    for number in (int(n) for n in chosen):
        run_id, count = scripts.run_ids[number], calls[number]
        results: list[list[Result]] = [[] for _ in range(count + 1)]
        filed = []
        files = scripts.files_standings is None or bool(scripts.files_standings[number])
        for row in range(int(tool_start[number]), int(tool_start[number + 1])):
            step, size = steps[row], chars[row]
            carried = named is None or named[row]
            results[step].append(
                Result(scripts.tool_names[tools[row]], None if size < 0 else size, carried)
            )
            filed_as = STANDING_MIX[standing[row]][0]
            if files and size >= 0 and filed_as is not None:
                filed.append((f"c{step}.0.{position[row]}", filed_as, step + 1))
        texts: list[str] = [""] * (count + 1)
        follow: list[list[Said]] = [[] for _ in range(count + 1)]
        for row in range(int(said_start[number]), int(said_start[number + 1])):
            step, by_user, length, start = said[row]
            if by_user:
                follow[step].append(Said("user", prose(length, start)))
            else:
                texts[step] = prose(length, start)
        entries: list[list[Entry]] = []
        for step in range(1, count + 1):
            here: list[Entry] = []
            if results[step]:
                here.append(Batch(tuple(results[step]), texts[step]))
            elif texts[step]:
                here.append(Said("assistant", texts[step]))
            entries.append([*here, *follow[step]])
        stream = build_stream(run_id, [Said("user", scripts.requests[number])], entries)
        if scripts.tokens_reported is not None and not scripts.tokens_reported[number]:
            stream.calls = [dataclasses.replace(call, input_tokens=0) for call in stream.calls]
        standings = [
            {
                "run_id": run_id,
                "tool_call_id": call_id,
                "standing": filed_as,
                "iteration": iteration,
                "source": "snapshot",
                "source_line": None,
            }
            for call_id, filed_as, iteration in filed
        ]
        yield stream, standings


#: The what-if bench's tools.
BENCH_TOOLS = ("lookup_order", "search_docs", "get_metrics", "probe", "fetch_page")


def result_sizes(rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
    """``count`` tool results' sizes in chars (10% tiny, 7% huge, the rest typical) and
    whether each was answered (97%), drawn in this order from ``rng``."""
    kind = rng.random(count)
    chars = np.where(
        kind < 0.1,
        rng.integers(0, 4, count),
        np.where(kind > 0.93, rng.integers(3000, 8001, count), rng.integers(40, 601, count)),
    )
    return chars, rng.random(count) > 0.03


def tool_batches(runs: int, calls: int, seed: int = 7) -> Scripts:
    """The what-if bench's runs: one request, then after each call but the last a batch
    of 1 to 3 parallel calls over 5 tools (``BENCH_TOOLS``), results tiny, typical or
    huge, about 3% never answered, each result given a standing (``STANDING_MIX``)."""
    rng = np.random.default_rng(seed)
    sizes = rng.choice((1, 2, 3), p=(0.65, 0.25, 0.10), size=runs * (calls - 1))
    count = int(sizes.sum())
    batch = np.repeat(np.arange(sizes.size), sizes)
    chars, answered = result_sizes(rng, count)
    weights = np.array([w for _, w in STANDING_MIX], dtype=np.float64)
    return Scripts(
        run_ids=[f"syn-{n:05d}" for n in range(runs)],
        requests=[f"TASK {n}" for n in range(runs)],
        calls=np.full(runs, calls, dtype=np.int64),
        tool_names=BENCH_TOOLS,
        run=batch // (calls - 1),
        step=batch % (calls - 1) + 1,
        tool=rng.integers(0, len(BENCH_TOOLS), count),
        chars=np.where(answered, chars, -1),
        standing=rng.choice(len(STANDING_MIX), p=weights / weights.sum(), size=count),
    )
