"""What-if speed: every window policy over many runs, vectorized across runs vs a per-run loop.

What is measured, on synthetic runs (``--runs`` runs of ``--calls`` model calls: one
request, then after each call a batch of 1 to 3 parallel tool calls over 5 tools, results
tiny, typical or huge, about 3% of calls never answered, each result given a standing
declared on the next call; drawn with NumPy,
``contextledger.window.synthetic.tool_batches``) under 6 policies
(``POLICIES``), all in this one process:

- ``kernel``: :func:`contextledger.window.kernel.advance`, every (policy, run) window
  advancing together one call at a time in NumPy arrays (one core), as ``whatif`` calls
  it (it also keeps what each visit's refusals need, which the loop does not);
- ``plain loop``: :func:`plain_replay` below, the same rules written as the obvious
  per-run, per-call Python loop over the same turn tables (one core).

Both read the same turn tables, laid out straight from the scripts (``script_arrays``,
not timed). After timing, the two are checked identical on every run (every metric and
every visit). On the first ``--check`` runs, built as messages, ``whatif``'s rows from
the kernel (messages laid out with ``turn_arrays``, refusals listed, rows assembled) are
checked equal to the rows of the exact replay (``contextledger.window.replay``, one run
and policy at a time) and to the kernel's counts above; both are timed, for scale. Each
kernel and loop figure is the median of ``--repeat`` repetitions (the loop:
``--loop-repeat``); the machine's other load counts against both alike, and the load
average is printed. It first prints the fact bench headline (``s0001-fact-bench`` under
keep 6, FACT results standing ``fact`` and NOISE ones ``noise``, declared on the next call).
Run: ``.venv/bin/python bench/whatif.py [--runs 10000] [--calls 30]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from polars.testing import assert_frame_equal

from contextledger.jobs.whatif import whatif
from contextledger.read.messages import RunMessages
from contextledger.window.kernel import (
    KERNEL_METRICS,
    VISIT_FIELDS,
    KernelResult,
    advance,
)
from contextledger.window.notice import MAX_NAMED_TOOLS
from contextledger.window.notice_length import drop_notice_length
from contextledger.window.policies import Policy, parse_policy
from contextledger.window.standings import StandingsTimeline
from contextledger.window.synthetic import (
    BENCH_TOOLS,
    STANDING_MIX,
    Scripts,
    script_streams,
    tool_batches,
)
from contextledger.window.turn_arrays import ABSENT, FINAL_STANDINGS, NEVER, TurnArrays
from contextledger.window.whatif import whatif_table, whatif_table_exact

POLICIES = (
    "none",
    "sliding:keep=6",
    "sliding:keep=3,last_tool_results=0",
    "sliding:keep=6,ledger_facts=2",
    "token_budget:threshold=2000",
    "token_budget:threshold=4000,keep=4,last_tool_results=1",
)
TOOLS = BENCH_TOOLS
STANDINGS = STANDING_MIX


# ── synthetic runs ─────────────────────────────────────────────────
# ``tool_batches`` (in the package, shared with ``contextledger synth``) draws them;
# ``script_streams`` builds them as messages.


def timelines_of(rows: Sequence[dict[str, Any]]) -> dict[str, StandingsTimeline]:
    """Each run's standings timeline from its findings-ledger rows."""
    by_run: dict[str, list[tuple[str, str, int]]] = {}
    for row in rows:
        by_run.setdefault(row["run_id"], []).append(
            (row["tool_call_id"], row["standing"], row["iteration"])
        )
    return {run_id: StandingsTimeline(filed) for run_id, filed in by_run.items()}


def script_arrays(syn: Scripts) -> TurnArrays:
    """The runs laid out as turns straight from their scripts (no messages built; every
    run makes the same number of calls, as ``tool_batches`` draws them)."""
    runs, calls = syn.runs, int(syn.calls[0])
    shape = (runs, calls)
    names = len(TOOLS)
    answered = syn.chars >= 0
    turn = syn.run * calls + syn.step  # turn t holds the batch after call t
    size = runs * calls

    def per_turn(values: np.ndarray) -> np.ndarray:
        return np.bincount(turn, weights=values, minlength=size).astype(np.int64).reshape(shape)

    results = per_turn(answered.astype(np.float64))
    asked = per_turn(np.ones(turn.size))
    facts = per_turn((answered & (syn.standing == 0)).astype(np.float64))
    final = np.zeros(size * len(FINAL_STANDINGS), dtype=np.int64)
    standing_index = np.array([FINAL_STANDINGS.index(s) for s, _ in STANDINGS])
    np.add.at(
        final, turn[answered] * len(FINAL_STANDINGS) + standing_index[syn.standing[answered]], 1
    )
    # a tool's place among the tools of its turn, in order of first appearance
    key = turn[answered] * names + syn.tool[answered]
    _, first_rows = np.unique(key, return_index=True)
    first_rows.sort()
    first_key = key[first_rows]
    first_turn = first_key // names
    starts = np.flatnonzero(np.diff(first_turn, prepend=-1))
    rank = np.arange(first_key.size) - np.repeat(starts, np.diff([*starts, first_key.size]))
    name_order = np.full(size * names, ABSENT, dtype=np.int8)
    name_order[first_key] = rank
    chars = per_turn(np.where(answered, syn.chars, 0).astype(np.float64))
    chars[:, 0] = [len(request) for request in syn.requests]
    msgs = (results + 1).astype(np.int32)
    msgs[:, 0] = 1
    entered_chars = np.cumsum(chars, axis=1)  # turn t enters before call t + 1
    tokens = -(-entered_chars // 4)
    fact_from = np.where(facts > 0, np.arange(calls) + 2, NEVER)
    return TurnArrays(
        run_ids=list(syn.run_ids),
        calls=np.full(runs, calls, dtype=np.int32),
        iterations=np.tile(np.arange(1, calls + 1, dtype=np.int32), (runs, 1)),
        msgs=msgs,
        chars=chars,
        entered=np.tile(np.arange(1, calls + 1, dtype=np.int32), (runs, 1)),
        user_head=np.tile(np.arange(calls) == 0, (runs, 1)),
        refuses=results < asked,
        results=results.astype(np.int32),
        pinnable=results > 0,
        fact_from=fact_from.astype(np.int32),
        final_counts=final.reshape(*shape, len(FINAL_STANDINGS)).astype(np.int32),
        request=np.zeros(runs, dtype=np.int32),
        armed=np.ones(runs, dtype=bool),
        tokens=tokens,
        recorded_full=np.ones(shape, dtype=bool),
        rate=tokens.sum(1) / entered_chars.sum(1),
        name_chars=np.tile(np.array([len(t) for t in TOOLS], dtype=np.int32), (runs, 1)),
        name_safe=np.ones((runs, names), dtype=bool),
        name_order=name_order.reshape(*shape, names),
        system=np.zeros(shape, dtype=bool),
        windowed=np.zeros(runs, dtype=bool),
    )


# ── the plain loop ─────────────────────────────────────────────────


def run_lists(arrays: TurnArrays) -> list[dict[str, Any]]:
    """Each run's turn table as Python lists (what the plain loop reads)."""
    table = {
        name: getattr(arrays, name).tolist()
        for name in (
            "calls", "iterations", "msgs", "chars", "entered", "user_head", "refuses",
            "pinnable", "fact_from", "final_counts", "request", "armed", "tokens",
            "recorded_full", "rate", "name_chars", "name_safe", "name_order",
        )
    }  # fmt: skip
    turns_of = (arrays.msgs > 0).sum(1).tolist()
    lists = []
    for r in range(len(arrays.run_ids)):
        calls, turns = table["calls"][r], turns_of[r]
        entering: list[list[int]] = [[] for _ in range(calls + 2)]
        for t in range(turns):
            if table["entered"][r][t] <= calls:
                entering[table["entered"][r][t]].append(t)
        rate = table["rate"][r]
        lists.append(
            {
                "calls": calls,
                "iterations": table["iterations"][r][:calls],
                "entering": entering,
                "msgs": table["msgs"][r][:turns],
                "chars": table["chars"][r][:turns],
                "user_head": table["user_head"][r][:turns],
                "refuses": table["refuses"][r][:turns],
                "names": [  # each turn's tools, by number
                    {b for b, order in enumerate(orders) if order < ABSENT}
                    for orders in table["name_order"][r][:turns]
                ],
                "pinnable": table["pinnable"][r][:turns],
                "fact_from": table["fact_from"][r][:turns],
                "final": table["final_counts"][r][:turns],
                "request": table["request"][r],
                "armed": table["armed"][r],
                "tokens": table["tokens"][r][:calls],
                "full": table["recorded_full"][r][:calls],
                "rate": None if rate != rate else rate,  # nan: no counts
                "name_chars": table["name_chars"][r],
                "name_safe": table["name_safe"][r],
                "name_order": table["name_order"][r][:turns],
            }
        )
    return lists


def _wire(run: dict[str, Any], span: list[int]) -> tuple[int, int]:
    """(safe names, chars of the names a notice prints) for the turns in ``span``."""
    seen: list[int] = []
    for t in span:
        order = run["name_order"][t]
        for tool in sorted(run["names"][t], key=order.__getitem__):
            if run["name_safe"][tool] and tool not in seen:
                seen.append(tool)
    shown = seen[:MAX_NAMED_TOOLS]
    chars = sum(run["name_chars"][b] for b in shown) + 2 * max(len(shown) - 1, 0)
    return len(seen), chars + (3 if len(seen) > len(shown) else 0)


def plain_replay(run: dict[str, Any], policy: Policy) -> dict[str, Any]:
    """The window rules as a plain loop: one run, one policy, one call after another."""
    window: list[int] = []  # turn numbers in window order; -1 is the drop notice
    notice_chars = 0
    blocked: list[tuple[bool, bool]] = []  # per record: (recency pin blocked, any pin blocked)
    out = dict.fromkeys(KERNEL_METRICS, 0)
    visits: list[tuple[int, ...]] = []
    dropped = False
    served_before = tokens_before = 0
    same_before = False
    keep = policy.keep_recent_turns
    fact_limit = policy.ledger_facts if run["armed"] else 0
    strategy = len(policy.strategy or "")
    request = run["request"]
    rate = run["rate"]
    budget_from: set[str] = set()
    known = True
    chars_of = run["chars"]
    for k in range(1, run["calls"] + 1):
        window.extend(run["entering"][k])
        iteration = run["iterations"][k - 1]
        engaged = False
        if policy.kind == "sliding":
            engaged = len(window) > keep
        elif policy.kind == "token_budget" and k >= 2 and tokens_before > 0 and same_before:
            budget_from.add("recorded")
            engaged = tokens_before > (policy.threshold or 0)
        elif policy.kind == "token_budget" and k >= 2 and tokens_before > 0 and rate is not None:
            budget_from.add("estimated")
            engaged = round(rate * served_before) > (policy.threshold or 0)
        if engaged:
            size = len(window)
            candidates = max(0, size - keep)
            before = sum(chars_of[t] if t >= 0 else notice_chars for t in window)
            stand_ltr = policy.last_tool_results > 0 and len(blocked) >= 2
            stand_ltr = stand_ltr and blocked[-1][0] and blocked[-2][0]
            stand_fact = fact_limit > 0 and len(blocked) >= 2 and blocked[-1][1] and blocked[-2][1]
            held: set[int] = set()
            if policy.last_tool_results > 0 and not stand_ltr:
                seen: set[int] = set()
                pins = []
                for pos in range(size - 1, -1, -1):
                    t = window[pos]
                    if t < 0 or t < request:
                        continue
                    if run["names"][t] - seen:
                        pins.append(pos)
                    seen |= run["names"][t]
                contested = [pos for pos in pins if pos < candidates]
                held = set(contested[: policy.last_tool_results])
                if held:
                    out["pins_held_last_tool_result"] += len(held)
                    out["pins_yielded_last_tool_result"] += len(contested) - len(held)
            facts: set[int] = set()
            if fact_limit > 0 and not stand_fact:
                contested = [
                    pos
                    for pos in range(candidates - 1, -1, -1)
                    if window[pos] >= 0
                    and window[pos] >= request
                    and run["pinnable"][window[pos]]
                    and run["fact_from"][window[pos]] <= iteration
                ]
                facts = set(contested[:fact_limit])
                if facts:
                    out["pins_held_ledger_fact"] += len(facts)
                    out["pins_yielded_ledger_fact"] += len(contested) - len(facts)
            out["pin_stand_downs"] += stand_ltr + stand_fact
            first = last = -1
            named_ltr = named_fact = False
            for pos in range(candidates):
                t = window[pos]
                plain_turn = t < 0 or (t != request and not run["refuses"][t])
                refused = t >= 0 and (not plain_turn or pos in held or pos in facts)
                if not refused:
                    if first == -1:
                        first = pos
                    last = pos
                    continue
                named_ltr = named_ltr or (plain_turn and pos in held)
                named_fact = named_fact or (plain_turn and pos in facts and pos not in held)
                if first != -1:
                    break
            span = window[first : last + 1] if first >= 0 else []
            removed = sum(run["msgs"][t] if t >= 0 else 1 for t in span)
            span_chars = sum(chars_of[t] if t >= 0 else notice_chars for t in span)
            new_window = window[:first] + window[last + 1 :] if span else window
            kept = first == 1 and request >= 0 and window[0] == request
            if span and (first == 0 or kept):
                plain = drop_notice_length(removed, iteration, strategy, kept, 0)
                safe, wire = _wire(run, [t for t in span if t >= 0])
                rich = drop_notice_length(removed, iteration, strategy, kept, wire)
                text = rich if safe and rich < span_chars else plain if plain < span_chars else 0
                if text:
                    new_window.insert(first, -1)
                    notice_chars = text
                elif first == 0 and not (
                    new_window and new_window[0] >= 0 and run["user_head"][new_window[0]]
                ):
                    new_window, removed, span = window, 0, []  # replacement-not-smaller
            window = new_window
            dropped = dropped or bool(span)
            after = sum(chars_of[t] if t >= 0 else notice_chars for t in window)
            blocked.append((removed == 0 and named_ltr, removed == 0 and (named_ltr or named_fact)))
            out["engaged_visits"] += 1
            out["removed_messages"] += removed
            visits.append((k - 1, removed, size, len(window), before, after))
        served = sum(chars_of[t] if t >= 0 else notice_chars for t in window)
        reported = run["tokens"][k - 1]
        same = run["full"][k - 1] and not dropped
        out["input_chars"] += served
        if same and reported > 0:
            out["input_tokens"] += reported
        else:
            out["input_tokens_estimated_calls"] += 1
            known = known and rate is not None
            out["input_tokens"] += round((rate or 0.0) * served)
        served_before, same_before, tokens_before = served, same, reported
    present = [t for t in window if t >= 0]
    gone = [t for k in range(1, run["calls"] + 1) for t in run["entering"][k] if t not in present]
    out["answer_message_count"] = sum(run["msgs"][t] for t in present) + window.count(-1)
    out["answer_content_chars"] = sum(chars_of[t] for t in present) + notice_chars * (-1 in window)
    out["answer_results_verbatim"] = sum(sum(run["final"][t]) for t in present)
    out["answer_facts_verbatim"] = sum(run["final"][t][0] for t in present)
    out["results_dropped"] = sum(sum(run["final"][t]) for t in gone)
    for position, standing in enumerate(FINAL_STANDINGS):
        column = {"ruled-out": "ruled_out", None: "undeclared"}.get(standing, standing)
        out[f"results_dropped_{column}"] = sum(run["final"][t][position] for t in gone)
    return {"metrics": out, "visits": visits, "budget": budget_from, "known": known}


def plain_all(lists: Sequence[dict[str, Any]], policies: Sequence[Policy]) -> list[list[Any]]:
    return [[plain_replay(run, policy) for run in lists] for policy in policies]


# ── checks ─────────────────────────────────────────────────────────


def check_plain(kernel: KernelResult, plain: list[list[dict[str, Any]]]) -> None:
    """Every metric and every visit of every (policy, run) agree."""
    for name in KERNEL_METRICS:
        theirs = np.array([[result["metrics"][name] for result in by_run] for by_run in plain])
        assert (kernel.metrics[name] == theirs).all(), name
    rows = [
        (p, r, *visit)
        for p, by_run in enumerate(plain)
        for r, result in enumerate(by_run)
        for visit in result["visits"]
    ]
    theirs = np.array(rows, dtype=np.int64).reshape(-1, 2 + len(VISIT_FIELDS))
    order = np.lexsort((kernel.visit_call, kernel.visit_run, kernel.visit_policy))
    ours = np.column_stack(
        [
            kernel.visit_policy[order],
            kernel.visit_run[order],
            kernel.visit_call[order],
            *(kernel.visit_values[name][order] for name in VISIT_FIELDS[1:]),
        ]
    )
    assert ours.shape == theirs.shape and (ours == theirs).all()
    for flag, word in (
        (kernel.budget_recorded, "recorded"),
        (kernel.budget_estimated, "estimated"),
    ):
        theirs = np.array([[word in result["budget"] for result in by_run] for by_run in plain])
        assert (flag == theirs).all(), word


def check_exact(
    kernel: KernelResult,
    streams: Sequence[RunMessages],
    timelines: dict[str, StandingsTimeline],
    policies: Sequence[Policy],
) -> tuple[float, float]:
    """``whatif``'s rows for ``streams`` (the first runs), from the kernel and from the exact
    replay, are the same, and hold the kernel's counts: (seconds for each)."""
    standings = [
        {"run_id": run_id, "tool_call_id": call_id, "standing": standing,
         "iteration": iteration, "source": "bench"}
        for run_id, timeline in timelines.items()
        for call_id, standing, iteration in timeline.rows
    ]  # fmt: skip
    labelled = [(policy.spec, policy) for policy in policies]
    start = time.perf_counter()
    fast = whatif_table(streams, labelled, standings)
    middle = time.perf_counter()
    exact = whatif_table_exact(streams, labelled, standings)
    end = time.perf_counter()
    assert_frame_equal(fast, exact)
    runs = len(streams)
    for name in KERNEL_METRICS:  # rows are (run, policy): the kernel's [policy, run], turned
        ours = kernel.metrics[name][:, :runs].T.reshape(-1)
        assert (fast[name].to_numpy() == ours).all(), name
    return middle - start, end - middle


# ── the headline ───────────────────────────────────────────────────

FACT_BENCH = Path(__file__).resolve().parents[1] / "data" / "sample" / "s0001-fact-bench.json.gz"
HEADLINE = (
    "sliding:keep=6,ledger_facts=0",
    "sliding:keep=6,ledger_facts=2",
    "sliding:keep=6,ledger_facts=4",
    "sliding:keep=6,ledger_facts=6",
)


def headline() -> pl.DataFrame:
    """Facts served verbatim at the fact bench's answer turn, by fact ceiling."""
    rows = pl.DataFrame(
        {
            "run_id": "s0001-fact-bench",
            "tool_call_id": [f"call-{i}" for i in range(1, 21)],
            "standing": ["fact" if i % 3 == 0 else "noise" for i in range(1, 21)],
            "iteration": list(range(2, 22)),  # declared on the next call
        }
    )
    recency, _ = whatif(FACT_BENCH, ["sliding:keep=6"])
    held, _ = whatif(FACT_BENCH, HEADLINE, rows)
    facts = pl.element().filter(pl.element().is_in([f"call-{i}" for i in range(3, 19, 3)]))
    which = pl.col("answer").struct.field("tool_call_ids_verbatim").list.eval(facts)
    return pl.concat([recency, held]).select(
        "policy",
        standings=pl.Series([False, True, True, True, True]),
        facts_verbatim=which.list.len(),
        which=which.list.join(" "),
        answer_messages=pl.col("answer_message_count"),
    )


# ── timing ─────────────────────────────────────────────────────────


def timed(work: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = work()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main(argv: Sequence[str] | None = None) -> int:
    began = time.perf_counter()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=5, help="kernel repetitions")
    parser.add_argument("--loop-repeat", type=int, default=3, help="plain loop repetitions")
    parser.add_argument("--check", type=int, default=200, help="runs checked against replay")
    args = parser.parse_args(argv)
    load = os.getloadavg()
    with pl.Config(
        tbl_hide_dataframe_shape=True,
        tbl_hide_column_data_types=True,
        fmt_str_lengths=80,
        tbl_width_chars=160,
    ):
        print(headline(), "\n")
    policies = [parse_policy(spec) for spec in POLICIES]
    start = time.perf_counter()
    syn = tool_batches(args.runs, args.calls)
    arrays = script_arrays(syn)
    lists = run_lists(arrays)
    made = time.perf_counter() - start
    checked = list(script_streams(syn, range(min(args.check, args.runs))))
    streams = [stream for stream, _ in checked]
    timelines = timelines_of([row for _, rows in checked for row in rows])
    print(
        f"{args.runs} synthetic runs x {args.calls} calls x {len(policies)} policies "
        f"({int(arrays.msgs.sum())} messages in {int((arrays.msgs > 0).sum())} turns; "
        f"made and laid out in {made:.1f} s)"
    )
    kernel_s, kernel = timed(lambda: advance(arrays, policies), args.repeat)
    loop_s, plain = timed(lambda: plain_all(lists, policies), args.loop_repeat)
    check_plain(kernel, plain)
    fast_s, exact_s = check_exact(kernel, streams, timelines, policies)
    visits = int(kernel.visit_run.size)
    print(f"identical: kernel = plain loop on all {args.runs} runs ({visits} engaged visits);")
    print(
        f"           whatif rows from the kernel = from the exact replay on the first "
        f"{len(streams)} runs"
    )
    print(f"kernel      median of {args.repeat}: {kernel_s:8.3f} s")
    print(f"plain loop  median of {args.loop_repeat}: {loop_s:8.3f} s")
    print(f"ratio: {loop_s / kernel_s:.1f}x")
    print(
        f"whatif over the first {len(streams)} runs (messages in, rows out): "
        f"{fast_s:.2f} s with the kernel, {exact_s:.2f} s replaying each run exactly"
    )
    now = os.getloadavg()
    print(
        f"whole bench {time.perf_counter() - began:.1f} s; load average "
        f"{load[0]:.2f} at the start, {now[0]:.2f} at the end ({os.cpu_count()} CPUs)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
