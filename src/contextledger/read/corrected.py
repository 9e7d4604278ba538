"""Corrected accounting (the default): what each model call was really sent and what this run used.

Where it departs from agentfootprint 9.62 (docs/ledger.md, "Where contextledger differs"):
every ``call-llm`` execution is a metered call, usage reported or not, and
grouped mode meters it once; a call offers the tools it carried (none on the
wrap-up call); uses are the tool calls this run executed (appended to
``history`` by this run, so a window's later drop does not hide them and an
earlier turn's calls are not counted again) and the skills this run
activated; injection credit matches slot records by ``sourceId``.

A kind the record cannot answer for is left unmetered for the run, never
scored as zero: in grouped mode the slots live inside subflows the root slice
cannot enter, so injections are unmetered there.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Sequence
from typing import Any

from contextledger.read.basis import redaction_basis, unmetered_by_basis
from contextledger.read.commitlog import ABSENT, ForwardFold
from contextledger.read.facts import KINDS, RunFacts, Use
from contextledger.read.reference import (
    LLM_CALL_SUBFLOW,
    _TokenCache,
    answer_slot_records,
    llm_call_mount_keys,
    tool_calls_in,
)
from contextledger.read.slice import AnswerSlice, LogIndex, answer_slice, log_index
from contextledger.read.snapshot import Bundle, Run

_CALL_STATE_KEYS = ("activeInjections", "dynamicToolSchemas", "wrapUpAsked")


def _model_call_offers(
    log: Sequence[Bundle],
    static_tool_names: Sequence[str],
    facts: RunFacts,
    tokens: _TokenCache,
    *,
    meter_injections: bool,
    index: LogIndex | None = None,
    calls: Sequence[int] | None = None,
) -> None:
    """Append the offers of every ``call-llm`` execution in ``log`` to ``facts``: the
    state as of each call's first bundle, folded only at the bundles that write it
    (``index`` and the calls' positions, found here when not given)."""
    index = LogIndex(log) if index is None else index
    calls = _call_positions(log, grouped=False) if calls is None else calls
    writes = sorted({at for key in _CALL_STATE_KEYS for at in index.positions.get(key, ())})
    fold = ForwardFold(_CALL_STATE_KEYS)
    folded = 0
    for call in calls:
        while folded < len(writes) and writes[folded] < call:
            fold.step(log[writes[folded]])
            folded += 1
        _offer_call(fold.values, static_tool_names, facts, tokens, meter_injections)


def _offer_call(
    state: dict[str, Any],
    static_tool_names: Sequence[str],
    facts: RunFacts,
    tokens: _TokenCache,
    meter_injections: bool,
) -> None:
    """The pieces in effect as one model call was assembled (callLLM.ts)."""
    call_index = facts.metered_call_count
    facts.metered_call_count += 1
    injections = state["activeInjections"]
    for injection in injections if isinstance(injections, list) else []:
        piece_id = injection.get("id") if isinstance(injection, dict) else None
        if not piece_id or not isinstance(piece_id, str):
            continue
        kind = "skill" if injection.get("flavor") == "skill" else "injection"
        if kind == "injection" and not meter_injections:
            continue
        facts.offers.append((call_index, kind, piece_id, tokens(injection)))
    if state["wrapUpAsked"] is True:
        return  # the wrap-up request carries no tools
    schemas = state["dynamicToolSchemas"]
    if isinstance(schemas, list):
        carried: set[str] = set()
        for schema in schemas:
            name = schema.get("name") if isinstance(schema, dict) else None
            if not name or not isinstance(name, str) or name in carried:
                continue
            carried.add(name)
            facts.offers.append((call_index, "tool", name, tokens(schema)))
    else:  # before the tools slot ran, callLLM falls back to the static schemas
        for name in dict.fromkeys(static_tool_names):
            facts.offers.append((call_index, "tool", name, 0))


def _appended_this_run(log: Sequence[Bundle], key: str, index: LogIndex) -> list[tuple[int, Any]]:
    """``(bundle position, element)`` for every element this run added to array ``key``:
    append tails, and what a later ``set`` holds beyond the value it replaced (a window's
    ``compact`` adds only its drop notice). The seed's ``set`` is carried state, not new.
    Only the bundles that write ``key`` are visited (``index``)."""
    added: list[tuple[int, Any]] = []
    fold = ForwardFold((key,))
    # each element's repr once: a set's elements are the next set's ``before`` (the same
    # objects), and their reprs were most of the time this took; each is held here, so
    # its id is not reused by another object while it counts
    reprs: dict[int, tuple[Any, str]] = {}

    def repr_of(item: Any) -> str:
        found = reprs.get(id(item))
        if found is None:
            found = reprs[id(item)] = (item, repr(item))
        return found[1]

    for position in index.positions.get(key, ()):
        bundle = log[position]
        before = fold.values[key]
        verbs = [entry.verb for entry in bundle.trace if entry.path == key]
        fold.step(bundle)
        if position == 0:
            continue
        for verb in verbs:
            tail = bundle.overwrite.get(key, ABSENT)
            if verb == "append" and isinstance(tail, list):
                added.extend((position, item) for item in tail)
        after = fold.values[key]
        if "set" in verbs and isinstance(after, list):
            previous = Counter(map(repr_of, before)) if isinstance(before, list) else Counter()
            for item in after:
                written = repr_of(item)
                if previous[written]:
                    previous[written] -= 1
                else:
                    added.append((position, item))
    return added


def _call_positions(log: Sequence[Bundle], grouped: bool) -> list[int]:
    """Root-log positions at which each model call starts (its call-llm stage, or in grouped
    mode its sf-llm-call mount), so a later write can be attributed to the call before it."""
    stage = LLM_CALL_SUBFLOW if grouped else "call-llm"
    nested = "/" + stage  # _local_stage_id(stage_id) == stage, without a call per bundle
    positions, seen = [], set()
    for position, bundle in enumerate(log):
        stage_id = bundle.stage_id
        if (stage_id == stage or stage_id.endswith(nested)) and (
            bundle.runtime_stage_id not in seen
        ):
            seen.add(bundle.runtime_stage_id)
            positions.append(position)
    return positions


def _uses_by_call(log: Sequence[Bundle], calls: Sequence[int], index: LogIndex) -> list[Use]:
    """Tool calls this run executed and skills it activated, each with the call that made it.

    A tool call is executed when the assistant message asking for it is appended to
    ``history`` (a request cut off by the iteration limit never is); the call that made
    it is the last model call before that write (``calls``: where each starts,
    :func:`_call_positions`).
    """

    def call_before(position: int) -> int | None:
        index = bisect.bisect_right(calls, position) - 1
        return index if index >= 0 else None

    uses: list[Use] = []
    for position, message in _appended_this_run(log, "history", index):
        for name in tool_calls_in([message]):
            uses.append(("tool", name, "tool-called", call_before(position)))
    for position, skill_id in _appended_this_run(log, "activatedInjectionIds", index):
        if isinstance(skill_id, str) and skill_id:
            uses.append(("skill", skill_id, "skill-activated", call_before(position)))
    return uses


def meter_run(run: Run, static_tool_names: Sequence[str]) -> RunFacts:
    """Offers and uses of one run under the corrected accounting."""
    snapshot = run.snapshot
    log = snapshot.commit_log or []
    mount_keys = llm_call_mount_keys(snapshot)
    facts = RunFacts("corrected", grouped=bool(mount_keys))
    if not log:
        facts.refused_reason = "empty commit log"
        return facts
    tokens = _TokenCache()
    index = log_index(snapshot, log)  # one pass over the log: every fold visits its writers
    calls = _call_positions(log, grouped=bool(mount_keys))
    call_logs = [snapshot.subflow_history(key) or [] for key in mount_keys] if mount_keys else [log]
    for call_log in call_logs:
        _model_call_offers(
            call_log,
            static_tool_names,
            facts,
            tokens,
            meter_injections=not mount_keys,
            index=log_index(snapshot, call_log),
            calls=calls if call_log is log else None,
        )
    facts.model_call_count = facts.metered_call_count
    if facts.metered_call_count == 0:
        facts.refused_reason = "no model call: the log holds no call-llm stage"
        facts.offers.clear()
        return facts
    facts.metered = True
    if mount_keys:
        facts.unmetered_kinds = ["injection"]
    facts.uses.extend(_uses_by_call(log, calls, index))
    answer = answer_slice(snapshot, index=index)
    facts.slice_available = answer is not None
    if answer is not None and not mount_keys:
        facts.uses.extend(_slot_credit(log, answer, index))
    _apply_redactions(facts, redaction_basis([log, *call_logs]))
    return facts


def _apply_redactions(facts: RunFacts, basis: dict[str, list[str]]) -> None:
    """Leave unmetered the kinds whose reads rest on a redaction (``RecordedRun.unmetered``);
    a run left with no kind to meter is refused, never scored as zero."""
    facts.basis = basis
    redacted = unmetered_by_basis(basis)
    if not redacted:
        return
    kinds = set(facts.unmetered_kinds) | set(redacted)
    facts.unmetered_kinds = [kind for kind in KINDS if kind in kinds]
    if kinds >= set(KINDS):
        keys = ", ".join(sorted(basis))
        facts.refused_reason = f"every kind rests on a redaction (redacted: {keys})"
        facts.metered = False
        facts.offers.clear()
        facts.uses.clear()
        return
    facts.offers[:] = [offer for offer in facts.offers if offer[1] not in kinds]
    facts.uses[:] = [use for use in facts.uses if use[0] not in kinds]


def _slot_credit(log: Sequence[Bundle], answer: AnswerSlice, index: LogIndex) -> list[Use]:
    """``answer-slice(slot)``: each injection whose slot record (by ``sourceId``) sits in a
    slot whose last write is on the answer slice, once per run.

    Only records naming an injection in effect at the end count: a registry tool's
    record in the tools slot also carries a ``sourceId`` but is a tool, credited by
    its calls.
    """
    flavor_by_id, records = answer_slot_records(log, answer, index)
    credited: dict[str, str] = {}
    for record in records:
        source_id = record.get("sourceId")
        if isinstance(source_id, str) and source_id in flavor_by_id:
            kind = "skill" if flavor_by_id[source_id] == "skill" else "injection"
            credited.setdefault(source_id, kind)
    return [(kind, piece_id, "answer-slice(slot)", None) for piece_id, kind in credited.items()]
