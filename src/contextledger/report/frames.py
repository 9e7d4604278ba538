"""The frames the report and the charts read that no other module computes.

A replayed window's timeline (turn by turn, call by call) and the two accountings'
totals side by side (whether a window is one a provider accepts is
:mod:`contextledger.window.audit`'s). Each is a small reshaping of what ``window``
and ``tables`` already compute.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from contextledger.ledger.compute import StoredTables
from contextledger.read.messages import Message, RunMessages
from contextledger.tables.build import RunTables
from contextledger.tables.windows import messages_table
from contextledger.window.policies import Policy, parse_policy
from contextledger.window.replay import Standings, replay

#: What each refusal reason means, for a reader who has not read agentfootprint.
REASON_TEXT = {
    "current-request": "holds the current request: never dropped",
    "system-envelope": "system envelope: never dropped",
    "paused-tool": "a paused tool call waits on it",
    "pending-check-in": "a check-in is pending on it",
    "unresolved-tool-call": "a tool call in it has no answer in the window yet",
    "last-tool-result": "pinned: the latest result of its tool",
    "ledger-fact": "pinned: holds a result the model filed as a fact",
    "inside-keep-window": "inside the keep window (the most recent turns)",
    "replacement-not-smaller": "the drop notice owed here would not be smaller: nothing left",
}
#: Columns of :func:`timeline_frame`.
TIMELINE_SCHEMA = {
    "run_id": pl.String,
    "policy": pl.String,
    "turn_index": pl.Int64,
    "turn_label": pl.String,
    "call": pl.Int64,
    "iteration": pl.Int64,
    "status": pl.String,
    "reason": pl.String,
    "turn_chars": pl.Int64,
}
_PIN_REASONS = frozenset({"last-tool-result", "ledger-fact"})
_KEEP_REASON = "inside-keep-window"


def _turn_labels(stream: RunMessages) -> tuple[dict[int, int], dict[int, str], dict[int, int]]:
    """Conversation turn of each stream message, a short label and the size of each turn."""
    table = pl.from_arrow(messages_table([stream]))
    assert isinstance(table, pl.DataFrame)
    turn_of: dict[int, int] = {}
    labels: dict[int, str] = {}
    chars: dict[int, int] = {}
    for row in table.filter(pl.col("turn_index").is_not_null()).iter_rows(named=True):
        turn, message = row["turn_index"], stream.messages[row["message_index"]]
        turn_of[message.index] = turn
        chars[turn] = chars.get(turn, 0) + message.chars
        if turn not in labels:
            labels[turn] = f"{turn:>2} {_describe(message)}"
    return turn_of, labels, chars


def _describe(message: Message) -> str:
    if message.role == "assistant" and message.tool_calls:
        names = sorted({call.name for call in message.tool_calls})
        return f"assistant → {', '.join(names)}"[:40]
    text = " ".join(message.content.split())
    text = text if len(text) <= 28 else f"{text[:27]}…"
    return f"{message.role}: {text}" if text else message.role


def timeline_frame(
    stream: RunMessages,
    policy: str | Policy,
    standings: Standings | None = None,
    *,
    last_calls: int | None = None,
) -> pl.DataFrame:
    """Replay ``policy`` over one run: one row per (conversation turn, model call).

    ``status`` is ``kept``, ``pinned`` (a last-tool-result or ledger-fact pin held
    it), ``refused`` (another rule kept it), ``dropped`` (it left at this call) or
    ``dropped earlier``; ``reason`` says why. A turn has no row before it entered.
    ``last_calls`` keeps the rows of the last that many calls only (the whole run is
    replayed): a run of thousands of turns and calls is millions of cells, and the
    chart draws the last ones.

    >>> from contextledger.jobs.whatif import read_inputs
    >>> stream = read_inputs("data/sample/s0001-fact-bench.json.gz").streams[0]
    >>> cells = timeline_frame(stream, "sliding:keep=6")
    >>> cells.group_by("status").len().sort("status").rows()
    [('dropped', 14), ('dropped earlier', 91), ('kept', 111), ('refused', 15)]
    """
    parsed = parse_policy(policy)
    result = replay(stream, parsed, standings)
    turn_of, labels, chars = _turn_labels(stream)
    rows: list[dict[str, Any]] = []
    entered: set[int] = set()
    first_kept = len(result.visits) - last_calls if last_calls is not None else 0
    for number, visit in enumerate(result.visits):
        before = [turn_of.get(m.index) for m in visit.window_before]
        served = {turn_of.get(m.index) for m in visit.served}
        present = {turn for turn in before if turn is not None}
        entered |= present
        if number < first_kept:
            continue
        reasons: dict[int, str] = {}
        for refusal in (visit.record or {}).get("refusals", []):
            position = refusal["messageIndex"]
            if 0 <= position < len(before) and before[position] is not None:
                reasons.setdefault(before[position], refusal["reason"])
        for turn in sorted(entered):
            reason = reasons.get(turn)
            if turn not in present:
                status, why = "dropped earlier", "left the window at an earlier call"
            elif turn not in served:
                status, why = "dropped", f"removed by {parsed.spec} before this call"
            elif reason in _PIN_REASONS:
                status, why = "pinned", REASON_TEXT[reason]
            elif reason is not None and reason != _KEEP_REASON:
                status, why = "refused", REASON_TEXT.get(reason, reason)
            elif visit.record is None:
                status, why = "kept", "the policy did not engage at this call"
            else:
                status, why = (
                    "kept",
                    REASON_TEXT[_KEEP_REASON] if reason else "outside the span this drop took",
                )
            rows.append(
                {
                    "run_id": stream.run_id,
                    "policy": parsed.spec,
                    "turn_index": turn,
                    "turn_label": labels[turn],
                    "call": visit.ordinal,
                    "iteration": visit.iteration,
                    "status": status,
                    "reason": why,
                    "turn_chars": chars[turn],
                }
            )
    return pl.DataFrame(rows, schema=TIMELINE_SCHEMA)


def accounting_totals(tables: RunTables) -> dict[str, int]:
    """The totals the two accountings disagree on, for one set of tables.

    Counted in one plan over the columns they need: an archive's are scanned, never
    collected whole (the reference's offers and uses at 10,000 runs: half a million
    rows read for nine numbers).

    >>> from contextledger.tables.build import read_runs
    >>> accounting_totals(read_runs("data/sample", mode="reference"))["runs refused"]
    2
    """
    runs, offers, uses = (_lazy(tables, name) for name in ("runs", "offers", "uses"))
    metered = runs.filter(pl.col("metered")).select("run_id", "metered_call_count")
    ids = metered.select("run_id")
    run_counts, kinds, signals = pl.collect_all(
        [
            runs.select(
                runs=pl.len(),
                metered=pl.col("metered").sum(),
                calls=pl.col("metered_call_count").filter(pl.col("metered")).sum(),
            ),
            offers.join(ids, on="run_id").group_by("kind").len(),
            uses.join(ids, on="run_id").group_by("signal").len(),
        ]
    )
    counts = run_counts.row(0, named=True)
    kind, signal = dict(kinds.iter_rows()), dict(signals.iter_rows())
    return {
        "runs metered": int(counts["metered"]),
        "runs refused": int(counts["runs"] - counts["metered"]),
        "model calls metered": int(counts["calls"]),
        "tool offers": kind.get("tool", 0),
        "injection offers": kind.get("injection", 0),
        "skill offers": kind.get("skill", 0),
        "tool uses (tool-called)": signal.get("tool-called", 0),
        "skill uses (skill-activated)": signal.get("skill-activated", 0),
        "answer-slice uses": signal.get("answer-slice(slot)", 0),
    }


def _lazy(tables: RunTables, name: str) -> pl.LazyFrame:
    """``tables``' table ``name`` as a lazy frame: an archive's scan (its rows not
    collected), else the frame in memory."""
    if isinstance(tables, StoredTables):
        return tables.scan(name)
    return tables.frame(name).lazy()


def accounting_comparison(reference: RunTables, corrected: RunTables) -> pl.DataFrame:
    """The reference's totals next to the corrected ones, with the difference.

    >>> from contextledger.tables.build import read_runs
    >>> frame = accounting_comparison(read_runs("data/sample", mode="reference"),
    ...                               read_runs("data/sample"))
    >>> frame.filter(pl.col("what") == "runs refused").row(0)
    ('runs refused', 2, 0, -2)
    """
    ours, theirs = accounting_totals(corrected), accounting_totals(reference)
    return pl.DataFrame(
        {
            "what": list(ours),
            "reference": [theirs[name] for name in ours],
            "corrected": list(ours.values()),
        }
    ).with_columns(difference=pl.col("corrected") - pl.col("reference"))


def refused_runs(tables: RunTables) -> pl.DataFrame:
    """The runs an accounting refused to meter, and why, in input order.

    >>> from contextledger.tables.build import read_runs
    >>> refused_runs(read_runs("data/sample", mode="reference"))["run_id"].to_list()
    ['s0246-llmcall', 's0250-zero']
    """
    return (
        pl.DataFrame(tables.runs)
        .filter(~pl.col("metered"))
        .select("run_id", "runner_kind", "model_call_count", "refused_reason", "source_path")
    )


#: Runs named in each refusal group of :func:`refused_groups`.
REFUSED_EXAMPLES = 3


def refused_groups(tables: RunTables, examples: int = REFUSED_EXAMPLES) -> pl.DataFrame:
    """The refused runs grouped by reason, most runs first: how many, by which runners,
    and the first ``examples`` runs (in input order). At 10,000 runs the reference
    refuses 1,428 for one reason: one row says it, the CSV beside the page lists them.

    >>> from contextledger.tables.build import read_runs
    >>> groups = refused_groups(read_runs("data/sample", mode="reference"))
    >>> groups.select("runs", "examples").rows()
    [(2, ['s0246-llmcall', 's0250-zero'])]
    """
    return (
        refused_runs(tables)
        .group_by("refused_reason", maintain_order=True)
        .agg(
            pl.len().alias("runs"),
            pl.col("runner_kind").drop_nulls().unique(maintain_order=True).alias("runners"),
            pl.col("model_call_count").sum().alias("model_calls"),
            pl.col("run_id").head(examples).alias("examples"),
        )
        .sort("runs", descending=True, maintain_order=True)
    )


def gate_rows(total: pl.DataFrame, order: str) -> list[dict[str, str]]:
    """The gates' one-row total as the page's table: what, how many (formatted for a
    reader) and what it means, in words instead of column names. Uses at risk (no
    tool call without its model call) and skills down-weighted (no skill) are left out
    when none was.

    >>> from contextledger.tables.build import read_runs
    >>> from contextledger.ledger.gates import gate_what_if
    >>> tables = read_runs("data/sample")
    >>> rows = gate_rows(gate_what_if(tables)[1], tables.order)
    >>> rows[0]["what"], rows[0]["count"]
    ('Offers left out', '88 of 579 (15.2%)')
    """
    t = total.row(0, named=True)

    def share(part: int, whole: int, about: str = "") -> str:
        of = f"{about}{part:,} of {about}{whole:,}"
        return of + (f" ({part / whole:.1%})" if whole else "")

    parole = f"every {t['refresh_every']}th demotion" if t["refresh_every"] else "never"
    rows = [
        (
            "Offers left out",
            share(t["offers_gated"], t["offered"]),
            "pieces the gates would not have sent to a model call",
        ),
        (
            "Approx tokens saved",
            share(t["approx_tokens_saved"], t["approx_tokens_spent"], "~"),
            "the estimate of what those offers cost",
        ),
        (
            "Runs with an offer left out",
            share(t["runs_gated"], t["runs_replayed"]),
            f"runs in {order}, each judged by the ledger of the runs before it",
        ),
        (
            "Uses lost",
            share(t["uses_lost"], t["used"]),
            "a tool call made at a call the gates left the tool out of, or an injection's "
            "answer-slice credit where it was left out of the last call that carried it",
        ),
        (
            "Uses at risk",
            f"{t['uses_at_risk']:,}",
            f"of {t['uses_judged_per_run']:,} tool call(s) whose model call is not recorded: "
            "the gates left the tool out of some calls of the run (out of every call: lost)",
        ),
        (
            "Demoted offers let through",
            f"{t['offers_paroled']:,}",
            f"parole: a demoted piece is sent anyway at {parole}",
        ),
        (
            "Skill offers down-weighted",
            f"{t['offers_down_weighted']:,}",
            "skills are re-ranked (their score times 0.25), never removed",
        ),
        (
            "Policy",
            f"{t['min_offers']:,} offers, {t['earn_rate_floor']:.0%} floor",
            f"a piece offered at least {t['min_offers']:,} times by earlier runs and earning "
            f"under {t['earn_rate_floor']:.0%} is demoted ({t['mode']} accounting)",
        ),
    ]
    applies = {  # rows about what these runs never had say nothing: left out
        "Uses at risk": t["uses_judged_per_run"] > 0,
        "Skill offers down-weighted": t["offers_down_weighted"] > 0,
    }
    return [
        {"what": what, "count": count, "means": means}
        for what, count, means in rows
        if applies.get(what, True)
    ]
