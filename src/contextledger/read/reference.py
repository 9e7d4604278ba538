"""agentfootprint 9.62 ``contextLedger.recordRun``, reproduced with its quirks.

This is the accounting behind ``--mode reference``. It is deliberately wrong
where the reference is (corpus README, "Things that surprised us"): uses come
from the final windowed history, grouped mode meters each call twice, a
wrap-up call offers every tool, a call whose provider reported no usage is
not metered, and answer-slice credit reads a field slot records never carry.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from contextledger.read.commitlog import ForwardFold, commit_value_at
from contextledger.read.facts import Offer, RunFacts, Use
from contextledger.read.jsjson import approx_tokens, approx_tokens_of_json
from contextledger.read.slice import SLOT_KEYS, AnswerSlice, LogIndex, answer_slice, log_index
from contextledger.read.snapshot import Bundle, Snapshot

LLM_CALL_SUBFLOW = "sf-llm-call"
_encode = msgspec.json.encode


def _local_stage_id(stage_id: str) -> str:
    return stage_id.rsplit("/", 1)[-1]


def _execution_index(runtime_stage_id: str) -> int:
    """footprintjs ``parseRuntimeStageId(...).executionIndex`` (NaN sorts as 0)."""
    _, _, index = runtime_stage_id.rpartition("#")
    digits = ""
    for char in index.lstrip():
        if char.isdigit() or (not digits and char in "+-"):
            digits += char
        else:
            break
    try:
        return int(digits)
    except ValueError:
        return 0


def llm_call_mount_keys(snapshot: Snapshot) -> list[str]:
    """Grouped-mode ``sf-llm-call#k`` subflow keys in execution order."""
    keys = [
        key
        for key in (snapshot.subflow_results or {})
        if LLM_CALL_SUBFLOW in key  # a quick no for most of a run's subflows
        and "#" in key
        and _local_stage_id(key.split("#")[0]) == LLM_CALL_SUBFLOW
    ]
    return sorted(keys, key=_execution_index)


def model_call_count(logs: Sequence[Sequence[Bundle]]) -> int:
    """How many ``call-llm`` stage executions the logs hold (real model calls)."""
    nested = "/call-llm"  # _local_stage_id(stage_id) == "call-llm", without a call per bundle
    return len(
        {
            bundle.runtime_stage_id
            for log in logs
            for bundle in log
            if bundle.stage_id == "call-llm" or bundle.stage_id.endswith(nested)
        }
    )


class _TokenCache:
    """approx_tokens per element: the same value is offered at many calls.

    Often it is a new object with the same content (each ``set`` of a key decodes
    its value again), so an object not seen is looked up by its compact JSON as
    msgspec writes it (C, 20x faster than measuring it the JavaScript way), and
    only a value never seen is measured: from that JSON where it is as long as
    JavaScript's (:func:`~contextledger.read.jsjson.approx_tokens_of_json`), else
    the JavaScript way. Values with the same msgspec JSON measure
    the same: it tells every JSON value apart but NaN and infinities from null,
    which ``JSON.stringify`` writes as ``null`` too. What is measured by its JSON is
    kept for the process (:data:`_MEASURED`): an agent offers the same skills and tool
    schemas in every run, so a process reading many runs measures each once.
    """

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[Any, int]] = {}

    def __call__(self, element: Any) -> int:
        hit = self._by_id.get(id(element))
        if hit is not None and hit[0] is element:
            return hit[1]
        try:
            key: bytes | None = _encode(element)
        except (TypeError, ValueError, OverflowError):  # a lone surrogate, a huge int
            key = None
        tokens = _MEASURED.get(key) if key is not None else None
        if tokens is None:
            measured = approx_tokens_of_json(key) if key is not None else None
            tokens = approx_tokens(element) if measured is None else measured
            if key is not None:
                _remember(key, tokens)
        self._by_id[id(element)] = (element, tokens)
        return tokens


#: Offer tokens by the offered value's msgspec JSON, across the runs a process reads
#: (:class:`_TokenCache`); emptied once its keys pass :data:`_MEASURED_BYTES`.
_MEASURED: dict[bytes, int] = {}
_MEASURED_BYTES = 32 << 20
_measured_bytes = 0


def _remember(key: bytes, tokens: int) -> None:
    global _measured_bytes
    if _measured_bytes + len(key) > _MEASURED_BYTES:
        _MEASURED.clear()
        _measured_bytes = 0
    _MEASURED[key] = tokens
    _measured_bytes += len(key)


def _offers_at_markers(
    log: Sequence[Bundle],
    static_tool_names: Sequence[str],
    offers: list[Offer],
    first_call_index: int,
    tokens: _TokenCache,
    index: LogIndex,
) -> int:
    """Fold one log forward, appending the offers at each call marker; return markers seen.

    Only the bundles that write the offered keys or are markers are visited (``index``:
    the log's :class:`LogIndex`); the others change neither the fold nor the offers."""
    positions = index.positions
    injection_writes = set(positions.get("activeInjections", ()))
    schema_writes = set(positions.get("dynamicToolSchemas", ()))
    user_writes = set(positions.get("userMessage", ()))
    # the reference's call marker: wrote totalInputTokens, not userMessage
    marker_at = {at for at in positions.get("totalInputTokens", ()) if at not in user_writes}
    fold = ForwardFold(("activeInjections", "dynamicToolSchemas"))
    injections: list[Any] = []
    schemas: list[Any] = []
    markers = 0
    for position in sorted(injection_writes | schema_writes | marker_at):
        bundle = log[position]
        fold.step(bundle)
        if position in injection_writes and isinstance(fold.values["activeInjections"], list):
            injections = fold.values["activeInjections"]
        if position in schema_writes and isinstance(fold.values["dynamicToolSchemas"], list):
            schemas = fold.values["dynamicToolSchemas"]
        if position not in marker_at:
            continue
        call_index = first_call_index + markers
        markers += 1
        for injection in injections:
            piece_id = injection.get("id") if isinstance(injection, dict) else None
            if not piece_id:
                continue
            kind = "skill" if injection.get("flavor") == "skill" else "injection"
            offers.append((call_index, kind, _js_key(piece_id), tokens(injection)))
        offered_tools: set[str] = set()
        for schema in schemas:
            name = schema.get("name") if isinstance(schema, dict) else None
            if not name or _js_key(name) in offered_tools:
                continue
            offered_tools.add(_js_key(name))
            offers.append((call_index, "tool", _js_key(name), tokens(schema)))
        for name in static_tool_names:
            if name in offered_tools:
                continue
            offered_tools.add(name)
            offers.append((call_index, "tool", name, 0))
    return markers


def _js_key(value: Any) -> str:
    """A row id as JavaScript's template string would print it."""
    if isinstance(value, str):
        return value
    if value is True:
        return "true"
    if value is False:
        return "false"
    from contextledger.read.jsjson import js_number

    if isinstance(value, int | float):
        return js_number(value)
    return str(value)


def tool_calls_in(history: Any) -> list[str]:
    """Tool names of every call in the assistant messages of ``history``, in order."""
    names: list[str] = []
    if not isinstance(history, list):
        return names
    for message in history:
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        calls = message.get("toolCalls")
        if not isinstance(calls, list):
            continue
        for call in calls:
            name = call.get("name") if isinstance(call, dict) else None
            if name:
                names.append(_js_key(name))
    return names


def record_run(snapshot: Snapshot, static_tool_names: Sequence[str]) -> RunFacts:
    """What ``contextLedger().recordRun`` books for one snapshot (reference accounting)."""
    log = snapshot.commit_log or []
    mount_keys = llm_call_mount_keys(snapshot)
    inner_logs = [snapshot.subflow_history(key) or [] for key in mount_keys]
    facts = RunFacts("reference", grouped=bool(mount_keys))
    facts.model_call_count = model_call_count([log, *inner_logs])
    if not log:
        facts.refused_reason = "empty commit log"
        return facts
    tokens = _TokenCache()
    markers = 0
    for offer_log in inner_logs if mount_keys else [log]:
        index = log_index(snapshot, offer_log)
        markers += _offers_at_markers(
            offer_log, static_tool_names, facts.offers, markers, tokens, index
        )
    if markers == 0:
        facts.refused_reason = (
            "no call marker: no bundle wrote totalInputTokens without userMessage "
            "(an LLMCall runner, or a provider that reported zero input tokens on every call)"
        )
        facts.offers.clear()
        return facts
    facts.metered = True
    facts.metered_call_count = markers
    last, index = len(log) - 1, log_index(snapshot, log)  # folded at the writers only
    history = commit_value_at(log, last, "history", writers=index.positions.get("history", []))
    facts.uses.extend(("tool", name, "tool-called", None) for name in tool_calls_in(history))
    activations = index.positions.get("activatedInjectionIds", [])
    activated = commit_value_at(log, last, "activatedInjectionIds", writers=activations)
    if isinstance(activated, list):
        facts.uses.extend(
            ("skill", skill_id, "skill-activated", None)
            for skill_id in activated
            if isinstance(skill_id, str) and skill_id
        )
    answer = answer_slice(snapshot, index=index)
    facts.slice_available = answer is not None
    if answer is not None:
        facts.uses.extend(_reference_slot_credit(log, answer, index))
    return facts


def answer_slot_records(
    log: Sequence[Bundle], answer: AnswerSlice, index: LogIndex | None = None
) -> tuple[dict[Any, Any], list[dict[str, Any]]]:
    """What ``answer-slice(slot)`` credit reads, in either accounting: the final injections'
    flavors by id, and the final records of every slot whose last writer is on the slice
    (folded at their writers only, when the log's ``index`` is given)."""
    last = len(log) - 1

    def final(key: str) -> Any:
        writers = None if index is None else index.positions.get(key, [])
        return commit_value_at(log, last, key, writers=writers)

    active = final("activeInjections")
    flavor_by_id = {
        injection["id"]: injection.get("flavor")
        for injection in (active if isinstance(active, list) else [])
        if isinstance(injection, dict) and injection.get("id")
    }
    on_slice: list[dict[str, Any]] = []
    for key in SLOT_KEYS:
        writer, in_slice = answer.slot_last_writers.get(key, (None, False))
        if writer is None or not in_slice:
            continue
        records = final(key)
        on_slice.extend(
            record
            for record in (records if isinstance(records, list) else [])
            if isinstance(record, dict)
        )
    return flavor_by_id, on_slice


def _reference_slot_credit(
    log: Sequence[Bundle], answer: AnswerSlice, index: LogIndex | None = None
) -> list[Use]:
    """``answer-slice(slot)`` as 9.62 computes it: every record with an ``id`` in a slot whose
    last writer is on the slice. Slot records carry ``sourceId``, never ``id``, so on real
    runs this credits nothing (the corrected accounting matches ``sourceId``)."""
    flavor_by_id, records = answer_slot_records(log, answer, index)
    credits: list[Use] = []
    for record in records:
        piece_id = record.get("id")
        if not piece_id:
            continue
        flavor = flavor_by_id.get(piece_id, record.get("source"))
        kind = "skill" if flavor == "skill" else "injection"
        credits.append((kind, _js_key(piece_id), "answer-slice(slot)", None))
    return credits
