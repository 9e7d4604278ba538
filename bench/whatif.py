"""What-if speed: every window policy over many runs, vectorized across runs vs a per-run loop.

What is measured, on synthetic runs (``--runs`` runs of ``--calls`` model calls: one
request, then after each call a batch of 1 to 3 parallel tool calls over 5 tools, results
tiny, typical or huge, about 3% of calls never answered, each result given a standing
declared on the next call) under 6 policies (``POLICIES``), all in this one process:

- ``kernel``: :func:`contextledger.window.kernel.advance`, every (policy, run) window
  advancing together one call at a time in NumPy arrays (one core);
- ``plain loop``: :func:`plain_replay` below, the same rules written as the obvious
  per-run, per-call Python loop over the same turn tables (one core).

Both read the same turn tables, laid out straight from the scripts (``script_arrays``,
not timed). After timing, the two are checked identical on every run (every metric and
every visit), and on the first ``--check`` runs the kernel is checked against the exact
replay ``whatif`` runs (``contextledger.window.replay`` over messages), with those runs
laid out from their messages (``turn_arrays``) giving the same answers. The exact
replay's own time on those runs is printed for scale. Each figure is the median of
``--repeat`` repetitions (the loop: ``--loop-repeat``); the machine's other load counts
against both alike. It first prints the fact bench headline (``s0001-fact-bench`` under
keep 6, FACT results standing ``fact`` and NOISE ones ``noise``, declared on the next call).
Run: ``.venv/bin/python bench/whatif.py [--runs 10000] [--calls 30]``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from contextledger.window.kernel import (
    FINAL_STANDINGS,
    KERNEL_METRICS,
    VISIT_FIELDS,
    TurnArrays,
    advance,
    drop_notice_length,
    turn_arrays,
)
from contextledger.window.messages import RunMessages
from contextledger.window.notice import MAX_NAMED_TOOLS
from contextledger.window.policies import Policy, parse_policy
from contextledger.window.replay import replay
from contextledger.window.standings import StandingsTimeline
from contextledger.window.synthetic import Batch, Result, Said, build_stream
from contextledger.window.whatif import whatif, whatif_row

POLICIES = (
    "none",
    "sliding:keep=6",
    "sliding:keep=3,last_tool_results=0",
    "sliding:keep=6,ledger_facts=2",
    "token_budget:threshold=2000",
    "token_budget:threshold=4000,keep=4,last_tool_results=1",
)
TOOLS = ("lookup_order", "search_docs", "get_metrics", "probe", "fetch_page")
STANDINGS = (("fact", 20), ("noise", 45), ("open", 15), ("ruled-out", 5), (None, 15))


# ── synthetic runs ─────────────────────────────────────────────────

#: One run: the batches after calls 1..calls-1, each ``[(tool index, chars or None, standing)]``.
Script = list[list[tuple[int, int | None, str | None]]]


def synthetic_scripts(runs: int, calls: int, seed: int = 7) -> list[Script]:
    """What each synthetic run's tools returned, and the standing each result was given."""
    rnd = random.Random(seed)
    standings = [s for s, _ in STANDINGS]
    weights = [w for _, w in STANDINGS]
    scripts = []
    for _ in range(runs):
        script = []
        for _ in range(calls - 1):
            batch = []
            for _ in range(rnd.choices((1, 2, 3), (65, 25, 10))[0]):
                size = rnd.random()
                chars = (
                    rnd.randint(0, 3)
                    if size < 0.1
                    else rnd.randint(3000, 8000)
                    if size > 0.93
                    else rnd.randint(40, 600)
                )
                answered = rnd.random() > 0.03
                standing = rnd.choices(standings, weights)[0] if answered else None
                batch.append((rnd.randrange(len(TOOLS)), chars if answered else None, standing))
            script.append(batch)
        scripts.append(script)
    return scripts


def _request(number: int) -> str:
    return f"TASK {number}"


def script_stream(number: int, script: Script) -> tuple[RunMessages, StandingsTimeline]:
    """The run as messages (what ``whatif`` replays), and its standings (declared on the
    next call)."""
    steps: list[list[Any]] = [
        [Batch(tuple(Result(TOOLS[tool], chars) for tool, chars, _ in batch))] for batch in script
    ]
    stream = build_stream(f"syn-{number:05d}", [Said("user", _request(number))], [*steps, []])
    rows = []
    for step, batch in enumerate(script, start=1):
        for i, (_, chars, standing) in enumerate(batch):
            if chars is not None and standing is not None:
                rows.append((f"c{step}.0.{i}", standing, step + 1))
    return stream, StandingsTimeline(rows)


def script_arrays(scripts: Sequence[Script]) -> TurnArrays:
    """The runs laid out as turns straight from their scripts (no messages built)."""
    runs, calls = len(scripts), len(scripts[0]) + 1
    shape = (runs, calls)
    names = len(TOOLS)
    out = TurnArrays(
        run_ids=[f"syn-{n:05d}" for n in range(runs)],
        calls=np.full(runs, calls, dtype=np.int16),
        iterations=np.tile(np.arange(1, calls + 1, dtype=np.int32), (runs, 1)),
        msgs=np.zeros(shape, dtype=np.int16),
        chars=np.zeros(shape, dtype=np.int64),
        entered=np.tile(np.arange(1, calls + 1, dtype=np.int16), (runs, 1)),
        user_head=np.zeros(shape, dtype=bool),
        refuses=np.zeros(shape, dtype=bool),
        names=np.zeros(shape, dtype=np.uint64),
        results=np.zeros(shape, dtype=np.int16),
        pinnable=np.zeros(shape, dtype=bool),
        fact_from=np.full(shape, np.iinfo(np.int16).max, dtype=np.int32),
        final_counts=np.zeros((*shape, len(FINAL_STANDINGS)), dtype=np.int16),
        request=np.zeros(runs, dtype=np.int16),
        armed=np.ones(runs, dtype=bool),
        tokens=np.zeros(shape, dtype=np.int64),
        recorded_full=np.ones(shape, dtype=bool),
        rate=np.zeros(runs),
        name_chars=np.tile(np.array([len(t) for t in TOOLS], dtype=np.int32), (runs, 1)),
        name_safe=np.full(runs, (1 << names) - 1, dtype=np.uint64),
        name_order=np.full((*shape, names), 127, dtype=np.int8),
        windowed=np.zeros(runs, dtype=bool),
    )
    out.msgs[:, 0] = 1
    out.user_head[:, 0] = True
    standing_index = {s: i for i, s in enumerate(FINAL_STANDINGS)}
    for r, script in enumerate(scripts):
        out.chars[r, 0] = len(_request(r))
        for t, batch in enumerate(script, start=1):
            answered = [
                (tool, chars, standing) for tool, chars, standing in batch if chars is not None
            ]
            out.msgs[r, t] = 1 + len(answered)
            out.chars[r, t] = sum(chars for _, chars, _ in answered)
            out.refuses[r, t] = len(answered) < len(batch)
            out.results[r, t] = len(answered)
            out.pinnable[r, t] = bool(answered)
            for tool, _, standing in answered:
                if not (int(out.names[r, t]) >> tool) & 1:
                    out.name_order[r, t, tool] = int(np.bitwise_count(out.names[r, t]))
                out.names[r, t] |= np.uint64(1 << tool)
                out.final_counts[r, t, standing_index[standing]] += 1
                if standing == "fact":
                    out.fact_from[r, t] = t + 2  # declared on call t + 1, known from the next
    entered_chars = np.cumsum(out.chars, axis=1)  # turn t enters before call t + 1
    out.tokens[:] = -(-entered_chars // 4)
    out.rate[:] = out.tokens.sum(1) / entered_chars.sum(1)
    return out


# ── the plain loop ─────────────────────────────────────────────────


def run_lists(arrays: TurnArrays, r: int) -> dict[str, Any]:
    """One run's turn table as Python lists (what the plain loop reads)."""
    calls = int(arrays.calls[r])
    turns = int((arrays.msgs[r] > 0).sum())
    entering: list[list[int]] = [[] for _ in range(calls + 2)]
    for t in range(turns):
        if arrays.entered[r, t] <= calls:
            entering[int(arrays.entered[r, t])].append(t)
    names = [int(x) for x in arrays.names[r, :turns]]
    return {
        "calls": calls,
        "iterations": arrays.iterations[r, :calls].tolist(),
        "entering": entering,
        "msgs": arrays.msgs[r, :turns].tolist(),
        "chars": arrays.chars[r, :turns].tolist(),
        "user_head": arrays.user_head[r, :turns].tolist(),
        "refuses": arrays.refuses[r, :turns].tolist(),
        "names": names,
        "pinnable": arrays.pinnable[r, :turns].tolist(),
        "fact_from": arrays.fact_from[r, :turns].tolist(),
        "final": arrays.final_counts[r, :turns].tolist(),
        "request": int(arrays.request[r]),
        "armed": bool(arrays.armed[r]),
        "tokens": arrays.tokens[r, :calls].tolist(),
        "full": arrays.recorded_full[r, :calls].tolist(),
        "rate": None if np.isnan(arrays.rate[r]) else float(arrays.rate[r]),
        "name_chars": arrays.name_chars[r].tolist(),
        "name_safe": int(arrays.name_safe[r]),
        "name_order": arrays.name_order[r, :turns].tolist(),
    }


def _wire(run: dict[str, Any], span: list[int]) -> tuple[int, int]:
    """(safe names, chars of the names a notice prints) for the turns in ``span``."""
    seen: list[int] = []
    for t in span:
        order = run["name_order"][t]
        for bit in sorted((b for b in range(len(order)) if order[b] < 127), key=order.__getitem__):
            if (run["name_safe"] >> bit) & 1 and bit not in seen:
                seen.append(bit)
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
                seen, pins = 0, []
                for pos in range(size - 1, -1, -1):
                    t = window[pos]
                    if t < 0 or t < request:
                        continue
                    if run["names"][t] & ~seen:
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


def check_plain(kernel: Any, plain: list[list[dict[str, Any]]]) -> None:
    """Every metric and every visit of every (policy, run) agree."""
    for p, by_run in enumerate(plain):
        for r, result in enumerate(by_run):
            for name in KERNEL_METRICS:
                assert kernel.metrics[name][p, r] == result["metrics"][name], (p, r, name)
            engaged = np.flatnonzero(kernel.visits["engaged"][p, :, r])
            ours = [
                (int(k), *(int(kernel.visits[f][p, k, r]) for f in VISIT_FIELDS[1:]))
                for k in engaged
            ]
            assert ours == result["visits"], (p, r)
            budget = {"recorded"} if kernel.budget_recorded[p, r] else set()
            budget |= {"estimated"} if kernel.budget_estimated[p, r] else set()
            assert budget == result["budget"], (p, r)


def check_exact(
    kernel: Any,
    streams: Sequence[RunMessages],
    timelines: dict[str, StandingsTimeline],
    policies: Sequence[Policy],
    runs: int,
) -> None:
    """The kernel agrees with the exact replay ``whatif`` runs, visit for visit."""
    laid = turn_arrays(streams, timelines)
    assert not laid.fallback, laid.fallback
    again = advance(laid, policies)
    for name in KERNEL_METRICS:  # laid out from messages = laid out from the scripts
        assert (again.metrics[name] == kernel.metrics[name][:, : len(streams)]).all(), name
    for r, stream in enumerate(streams[:runs]):
        timeline = timelines[stream.run_id]
        for p, policy in enumerate(policies):
            row = whatif_row(stream, policy.spec, replay(stream, policy, timeline.at), timeline)
            for name in KERNEL_METRICS:
                assert kernel.metrics[name][p, r] == row[name], (stream.run_id, policy, name)
            engaged = np.flatnonzero(kernel.visits["engaged"][p, :, r])
            assert [int(k) + 1 for k in engaged] == [v["iteration"] for v in row["visits"]]
            ours = [int(kernel.visits["removed_message_count"][p, k, r]) for k in engaged]
            assert ours == [v["removed_message_count"] for v in row["visits"]]


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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=5, help="kernel repetitions")
    parser.add_argument("--loop-repeat", type=int, default=3, help="plain loop repetitions")
    parser.add_argument("--check", type=int, default=200, help="runs checked against replay")
    args = parser.parse_args(argv)
    with pl.Config(
        tbl_hide_dataframe_shape=True,
        tbl_hide_column_data_types=True,
        fmt_str_lengths=80,
        tbl_width_chars=160,
    ):
        print(headline(), "\n")
    policies = [parse_policy(spec) for spec in POLICIES]
    start = time.perf_counter()
    scripts = synthetic_scripts(args.runs, args.calls)
    arrays = script_arrays(scripts)
    lists = [run_lists(arrays, r) for r in range(args.runs)]
    made = time.perf_counter() - start
    checked = [script_stream(n, scripts[n]) for n in range(min(args.check, args.runs))]
    streams = [stream for stream, _ in checked]
    timelines = {stream.run_id: timeline for stream, timeline in checked}
    print(
        f"{args.runs} synthetic runs x {args.calls} calls x {len(policies)} policies "
        f"({int(arrays.msgs.sum())} messages in {int((arrays.msgs > 0).sum())} turns; "
        f"made and laid out in {made:.1f} s)"
    )
    kernel_s, kernel = timed(lambda: advance(arrays, policies), args.repeat)
    loop_s, plain = timed(lambda: plain_all(lists, policies), args.loop_repeat)
    check_plain(kernel, plain)
    check_exact(kernel, streams, timelines, policies, args.check)
    exact_s, _ = timed(
        lambda: [
            replay(stream, policy, timelines[stream.run_id].at)
            for stream in streams
            for policy in policies
        ],
        1,
    )
    visits = int(kernel.visits["engaged"].sum())
    print(f"identical: kernel = plain loop on all {args.runs} runs ({visits} engaged visits); ")
    print(f"           kernel = exact replay on the first {args.check} runs")
    print(f"kernel      median of {args.repeat}: {kernel_s:8.3f} s")
    print(f"plain loop  median of {args.loop_repeat}: {loop_s:8.3f} s")
    print(f"ratio: {loop_s / kernel_s:.1f}x")
    per_run = exact_s / max(len(streams), 1)
    print(
        f"(exact replay, Message objects: {exact_s:.2f} s for {len(streams)} runs, "
        f"about {per_run * args.runs:.0f} s for {args.runs} at that rate)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
