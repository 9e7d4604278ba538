"""The message stream of a recorded run, and the per-call facts a window replay needs.

The root commit log holds every message the run ever put in its window, even
the ones a window strategy later removed: ``seed`` sets the opening window,
``tool-calls`` and ``wrap-up`` append tails, and ``compact`` (the window
stage) sets the whole new window. Folding those writes forward gives

* the **stream**: every message in the order it entered the live window, with
  the stage that put it there and the model call it first reached;
* the **calls**: for each model call, the window the window stage saw before
  it, the window that call was served, and the input tokens the provider
  reported for it (``totalInputTokens`` is a running sum; a call that reported
  0 writes nothing).

A replay under another policy rebuilds its windows from the stream alone; the
recorded windows are kept for comparison.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from contextledger.read.commitlog import ABSENT, ForwardFold
from contextledger.read.jsjson import js_stringify, utf16_length
from contextledger.read.snapshot import Bundle, ReadProblem, Run

#: Opening of the notice a drop strategy writes in place of what it removed.
DROP_NOTICE_PREFIX = "[dropped history"
#: Opening of the frame a summarizing fold writes.
COMPACTED_FRAME_PREFIX = "[compacted history"

#: Stage ids whose bundles are one model call (``sf-llm-call`` under grouped mode).
CALL_STAGE_IDS = frozenset({"call-llm", "sf-llm-call"})
#: Stage id of the window stage.
WINDOW_STAGE_ID = "compact"

#: Characters of a message's text that name it to a user (``window.audit.describe_message``).
PREVIEW_CHARS = 40


def text_preview(content: str) -> str:
    """A message's text as one line, cut to :data:`PREVIEW_CHARS` (``…`` where cut): what
    names it to a user, and all an archive keeps of the text a replay does not compare.
    A preview's preview is itself.

    >>> text_preview("Answer 1 for s0207-conv:   latency shard 7 is hot, the rest are fine")
    'Answer 1 for s0207-conv: latency shard …'
    """
    text = " ".join(content.split())
    return text if len(text) <= PREVIEW_CHARS else f"{text[: PREVIEW_CHARS - 1]}…"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call an assistant message makes."""

    id: str
    name: str


@dataclass(frozen=True, slots=True, eq=False)
class Message:
    """One message of a window, with what the stream knows about it.

    The first block is the message itself (what the window rules read); the
    second is where it sits in the run's stream. A message built by hand (tests,
    or a notice a replay authored) has ``index == -1``.
    """

    role: str
    content: str
    tool_call_id: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    #: The tool name the message itself carries (``toolName``), if any.
    tool_name: str | None = None
    #: True when the message carries ``injectedBy`` (an injection delivered it).
    injected: bool = False
    #: True when the message carries ``notDispatched`` (a batch settlement wrote it).
    not_dispatched: bool = False
    #: The message as recorded (JSON-ready, key order kept); None means ``{role, content}``.
    raw: dict[str, Any] | None = field(default=None, repr=False)
    # ── where it sits in the run's stream ──
    index: int = -1
    #: Ordinal (1-based) of the first model call after it entered the live window;
    #: None when it entered after the last call.
    first_call: int | None = None
    #: ``runtimeStageId`` of the write that put it in the window (what removals name).
    origin: str = ""
    #: True when this run's window stage wrote it (a drop notice or a summary frame).
    window_authored: bool = False
    #: ``tool_name``, else the name of the call it answers, found anywhere in the stream.
    resolved_tool_name: str | None = None
    #: The content's length when the content itself was not kept (a message read back
    #: from an archive, which stores only the text a replay compares, or a preview);
    #: None: measure it.
    stored_chars: int | None = None
    #: How a replayed policy rewrote it in place, if it did: ``"placeholder"`` (a tool
    #: result or call input cleared), ``"preview"`` (an output cut to its opening) or
    #: ``"summary"`` (a stand-in for messages a summarizer replaced); None: as recorded.
    edit: str | None = None
    #: Content length in UTF-16 code units (JavaScript ``.length``): ``stored_chars``, else
    #: measured once here, since the audits sum it over every window of every call.
    chars: int = field(init=False, repr=False)

    def __post_init__(self) -> None:
        stored = self.stored_chars
        measured = utf16_length(self.content) if stored is None else stored
        object.__setattr__(self, "chars", measured)

    @property
    def is_drop_notice(self) -> bool:
        return self.role == "user" and self.content.startswith(DROP_NOTICE_PREFIX)

    @property
    def is_summary(self) -> bool:
        return self.role == "user" and self.content.startswith(COMPACTED_FRAME_PREFIX)

    @property
    def library_authored(self) -> bool:
        """A drop notice, a summary frame or an injected message: nobody said it."""
        return self.is_drop_notice or self.is_summary or self.injected

    def as_json(self) -> dict[str, Any]:
        """The message as the wire and the snapshot hold it."""
        if self.raw is not None:
            return self.raw
        return {"role": self.role, "content": self.content}


def message_from_json(
    obj: Any, tool_names: Mapping[str, str] | None = None, **stream: Any
) -> Message:
    """A :class:`Message` from one recorded ``LLMMessage`` object; ``tool_names``: the
    stream's tool names by call id, which name a tool result that does not name itself
    (:attr:`Message.resolved_tool_name`)."""
    if not isinstance(obj, dict):
        obj = {"role": "", "content": ""}
    content = obj.get("content")
    calls = obj.get("toolCalls")
    tool_calls: tuple[ToolCall, ...] = ()
    if isinstance(calls, list):
        tool_calls = tuple(
            ToolCall(str(call.get("id") or ""), str(call.get("name") or ""))
            for call in calls
            if isinstance(call, dict)
        )
    role = str(obj.get("role") or "")
    call_id = obj.get("toolCallId")
    call_id = call_id if isinstance(call_id, str) else None
    name = obj.get("toolName")
    name = name if isinstance(name, str) else None
    resolved = None
    if tool_names is not None and role == "tool":
        resolved = name or tool_names.get(call_id or "") or None
    injected = obj.get("injectedBy")
    return Message(
        role=role,
        content=content if isinstance(content, str) else "",
        tool_call_id=call_id,
        tool_calls=tool_calls,
        tool_name=name,
        injected=injected is not None and injected is not ABSENT,
        not_dispatched=obj.get("notDispatched") is True,
        raw=obj,
        resolved_tool_name=resolved,
        **stream,
    )


@dataclass(frozen=True, slots=True)
class ModelCall:
    """One model call of a run, and the windows around it."""

    #: 1-based position among the run's model calls.
    ordinal: int
    #: ``iteration`` in scope when the call was made (the records' ``iteration``).
    iteration: int
    #: Commit-log index of the call's (first) bundle.
    bundle_index: int
    runtime_stage_id: str
    #: ``runtimeStageId`` of the window stage that ran before it (None without one).
    window_stage_id: str | None
    #: Input tokens the provider reported for this call; 0 when it reported none.
    input_tokens: int
    #: Stream indices of the live window the window stage saw before this call.
    window_seen: tuple[int, ...]
    #: Stream indices of the window this call was served.
    window_served: tuple[int, ...]
    #: Input tokens the provider says it read from its prompt cache for this call, and
    #: wrote to it; None where the recording does not say (snapshots never do; OpenTelemetry
    #: instrumentations leave a zero out).
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None


@dataclass
class RunMessages:
    """The stream and the calls of one run."""

    run_id: str
    user_message: str | None
    messages: list[Message]
    calls: list[ModelCall]
    #: Stream indices of ``history`` at the last bundle (the final window).
    final_window: tuple[int, ...]
    #: ``compactions`` at the last bundle: the WindowRecords the run filed.
    recorded_records: list[dict[str, Any]]
    #: Lines naming what the reader doubts about this stream (``PATH:LINE (run ID):
    #: reason``), said once when it is replayed; not part of the stream's equality.
    #: A usage count read but out of any call's range is one (the count read as not
    #: reported): a note, not a problem, since nothing was left unread.
    notes: list[str] = field(default_factory=list, compare=False)

    def window(self, indices: Iterable[int]) -> list[Message]:
        """The messages at these stream indices."""
        return [self.messages[i] for i in indices]

    def entering_before(self, ordinal: int) -> list[Message]:
        """Messages the run itself appended (not its window stage) before call ``ordinal``."""
        return list(self._entering.get(ordinal, ()))

    @cached_property
    def _entering(self) -> dict[int, list[Message]]:
        """:meth:`entering_before` of every call, grouped in one pass over the stream (the
        replays ask it at every call; a stream is not changed once built)."""
        out: dict[int, list[Message]] = {}
        for message in self.messages:
            if message.first_call is not None and not message.window_authored:
                out.setdefault(message.first_call, []).append(message)
        return out

    def entering_after_last_call(self) -> list[Message]:
        """Messages the run appended after its last model call."""
        return [m for m in self.messages if m.first_call is None and not m.window_authored]

    def appended_by_stage(self) -> dict[str, list[int]]:
        """Stream indices each ``runtimeStageId`` put in the window, in order."""
        out: dict[str, list[int]] = {}
        for message in self.messages:
            out.setdefault(message.origin, []).append(message.index)
        return out

    def tokens_per_char(self) -> float | None:
        """Reported input tokens per served-window char, over the calls that reported.

        The rate a counterfactual window's tokens are estimated at. None when no
        call reported tokens (nothing to estimate from).
        """
        tokens = chars = 0
        for call in self.calls:
            if call.input_tokens > 0:
                tokens += call.input_tokens
                chars += sum(self.messages[i].chars for i in call.window_served)
        if tokens == 0 or chars == 0:
            return None
        return tokens / chars


def common_ends(old: Sequence[Any], new: Sequence[Any]) -> tuple[int, int]:
    """Longest common head, then longest common tail of the rest: ``(head, tail)`` (how a
    message list grew or was rewritten between two calls)."""
    head = 0
    limit = min(len(old), len(new))
    while head < limit and old[head] == new[head]:
        head += 1
    tail = 0
    while (
        tail < len(old) - head
        and tail < len(new) - head
        and old[len(old) - 1 - tail] == new[len(new) - 1 - tail]
    ):
        tail += 1
    return head, tail


def rebuild_messages(run: Run) -> RunMessages:
    """Fold a run's root commit log into its message stream and its model calls."""
    log: list[Bundle] = run.snapshot.commit_log or []
    fold = ForwardFold(["userMessage", "iteration", "totalInputTokens", "compactions"])
    raws: list[Any] = []  # stream index -> recorded message object
    origins: list[str] = []
    authored: list[bool] = []
    entered_after_call: list[int] = []  # calls made before each message entered
    live: list[int] = []  # stream indices of the live window
    seen_by_stage: list[int] | None = None  # live window as the window stage found it
    stage_id: str | None = None
    calls: list[ModelCall] = []
    call_ids: set[str] = set()
    previous_total: float = 0
    tokens_of: dict[str, int] = {}

    def enter(objs: Iterable[Any], origin: str, by_window: bool) -> list[int]:
        added = []
        for obj in objs:
            raws.append(obj)
            origins.append(origin)
            authored.append(by_window)
            entered_after_call.append(len(calls))
            added.append(len(raws) - 1)
        return added

    for position, bundle in enumerate(log):
        fold.step(bundle)
        is_call = bundle.stage_id in CALL_STAGE_IDS
        if bundle.stage_id == WINDOW_STAGE_ID:
            seen_by_stage = list(live)
            stage_id = bundle.runtime_stage_id
        for entry in bundle.trace:
            if entry.path == "totalInputTokens":
                total = fold.values["totalInputTokens"]
                total = total if isinstance(total, int | float) else 0
                if is_call:
                    key = bundle.runtime_stage_id
                    tokens_of[key] = tokens_of.get(key, 0) + int(total - previous_total)
                previous_total = total
            if entry.path != "history":
                continue
            value = bundle.overwrite.get("history")
            if entry.verb == "append" and isinstance(value, list):
                live.extend(enter(value, bundle.runtime_stage_id, False))
            elif entry.verb == "set" and isinstance(value, list):
                old = [raws[i] for i in live]
                head, tail = common_ends(old, value)
                middle = value[head : len(value) - tail]
                by_window = bundle.stage_id == WINDOW_STAGE_ID
                added = enter(middle, bundle.runtime_stage_id, by_window)
                live = live[:head] + added + (live[len(live) - tail :] if tail else [])
            elif entry.verb == "delete" or not isinstance(value, list):
                live = []
        if is_call and bundle.runtime_stage_id not in call_ids:
            call_ids.add(bundle.runtime_stage_id)
            iteration = fold.values["iteration"]
            counted = isinstance(iteration, int) and not isinstance(iteration, bool)
            calls.append(
                ModelCall(
                    ordinal=len(calls) + 1,
                    iteration=iteration if counted else len(calls) + 1,
                    bundle_index=position,
                    runtime_stage_id=bundle.runtime_stage_id,
                    window_stage_id=stage_id,
                    input_tokens=0,
                    window_seen=tuple(live if seen_by_stage is None else seen_by_stage),
                    window_served=tuple(live),
                )
            )
            seen_by_stage = None
            stage_id = None

    notes: list[str] = []  # a count read, that no call reaches: said, not a problem
    for index, call in enumerate(calls):
        tokens = max(0, tokens_of.get(call.runtime_stage_id, 0))
        if tokens > MAX_REPORTED_TOKENS:
            if not notes:
                reason = (
                    f"totalInputTokens grew by {tokens} at model call {call.ordinal}, past "
                    "2**40, which no real call reaches: read as not reported (the what-if "
                    "leaves it out of its token figures)"
                )
                where = ReadProblem(run.source.path, run.source.line, run.run_id, reason).where
                notes.append(f"{where}: {reason}")
            tokens = 0
        calls[index] = replace(call, input_tokens=tokens)
    _check_ranges(calls)
    messages = _stream(raws, origins, authored, entered_after_call, len(calls))
    said = fold.values["userMessage"]
    records = fold.values["compactions"]
    return RunMessages(
        run_id=run.run_id,
        user_message=said if isinstance(said, str) else None,
        messages=messages,
        calls=calls,
        final_window=tuple(live),
        recorded_records=records if isinstance(records, list) else [],
        notes=notes,
    )


#: Largest iteration a replay keeps (``schema.MODEL_CALL.iteration`` is 32-bit).
MAX_ITERATION = 2**31 - 1
#: Largest usage count (tokens) read from a trace as reported: past any real call (a
#: million-token window is 2**20) and small enough that a sum over 2**23 calls at this
#: size still fits in 64 bits. A larger or negative count is read as not reported.
MAX_REPORTED_TOKENS = 2**40
#: Largest input token count per call a replay keeps: JavaScript's largest exact integer
#: (a provider's count beyond it was never exact, and sums of such counts overflow).
MAX_INPUT_TOKENS = 2**53 - 1


def _check_ranges(calls: Sequence[ModelCall]) -> None:
    """Raise ``ValueError`` for a call whose iteration or input tokens a replay (and an
    archive's ``streams`` table) cannot hold: the run's stream is not replayable."""
    for call in calls:
        if not -MAX_ITERATION - 1 <= call.iteration <= MAX_ITERATION:
            msg = (
                f"model call {call.ordinal} ({call.runtime_stage_id}) has iteration "
                f"{call.iteration}, beyond the 32-bit range a window replay keeps"
            )
            raise ValueError(msg)
        if call.input_tokens > MAX_INPUT_TOKENS:
            msg = (
                f"model call {call.ordinal} ({call.runtime_stage_id}) reported more than "
                "2**53 - 1 input tokens (JavaScript's largest exact integer)"
            )
            raise ValueError(msg)


def _stream(
    raws: list[Any],
    origins: list[str],
    authored: list[bool],
    entered_after_call: list[int],
    call_count: int,
) -> list[Message]:
    names: dict[str, str] = {}
    for obj in raws:
        for call in (obj.get("toolCalls") or []) if isinstance(obj, dict) else []:
            if isinstance(call, dict) and call.get("id") and call.get("name"):
                names.setdefault(str(call["id"]), str(call["name"]))
    out = []
    for index, obj in enumerate(raws):
        calls_before = entered_after_call[index]
        message = message_from_json(
            obj,
            names,  # named as built: replace() would build it, and measure it, again
            index=index,
            first_call=calls_before + 1 if calls_before < call_count else None,
            origin=origins[index],
            window_authored=authored[index],
        )
        out.append(message)
    return out


def window_json(messages: Iterable[Message]) -> str:
    """``JSON.stringify`` of a window, as the snapshot would hold it."""
    return js_stringify([m.as_json() for m in messages]) or "[]"
