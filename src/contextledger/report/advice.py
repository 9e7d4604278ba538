"""The page's opening sentences: what a reader should take away, and the window policy
it would pick, each with its numbers (:func:`findings`, :func:`recommendation`)."""

from __future__ import annotations

import math

import polars as pl

from contextledger import charts
from contextledger.report.model import ReportData
from contextledger.window.whatif import parse_policies

#: The share of the facts keeping everything brings to the answer turn that a
#: recommended window policy must bring too (:func:`recommendation`).
NEARLY_ALL_FACTS = 0.95


def findings(data: ReportData) -> list[str]:
    """The page's opening sentences: what a reader should take away, with numbers."""
    runs = pl.DataFrame(data.tables.runs)
    metered = int(runs["metered"].sum()) if runs.height else 0
    spent = int(data.rows["approx_tokens_spent"].sum())
    offered = int((data.rows["offered"] > 0).sum())  # a piece only called is no offer
    out = [
        f"{runs.height:,} run(s) read: {metered:,} metered, {runs.height - metered:,} refused, "
        f"{data.tables.problems.num_rows:,} input(s) unreadable ({data.tables.mode} accounting). "
        f"{offered:,} context pieces were offered, ~{spent:,} approx tokens in all."
    ]
    never = data.rows.filter(pl.col("offered") == 0)
    if never.height:
        tools = never.filter(pl.col("kind") == "tool").height
        what = "tool(s) called" if tools == never.height else "piece(s) used"
        names = ", ".join(never["id"].head(3).to_list())
        out.append(
            f"{never.height:,} {what} but never offered: {names}"
            f"{', ...' if never.height > 3 else ''} (not counted among the offered)."
        )
    if data.unreplayed:
        out.append(
            f"{len(data.unreplayed):,} run(s) are in the ledger but not in the window policies: "
            "their message stream could not be read (listed at the end)."
        )
    idle = charts.never_used(data.rows)
    if idle.height:
        cost = int(idle["approx_tokens_spent"].sum())
        worst = ", ".join(
            f"{row['id']} (~{row['approx_tokens_spent']:,})" for row in idle.head(3).to_dicts()
        )
        out.append(
            f"{idle.height:,} piece(s) offered at least {data.min_offers} times were never used: "
            f"~{cost:,} approx tokens ({cost / max(spent, 1):.1%} of all) bought nothing. "
            f"Most expensive: {worst}."
        )
    total = data.gate_total.row(0, named=True)
    if total["offers_gated"]:
        share = total["approx_tokens_saved"] / max(total["approx_tokens_spent"], 1)
        out.append(
            f"agentfootprint's ledger gates would have left out {total['offers_gated']:,} "
            f"offers, saving ~{total['approx_tokens_saved']:,} approx tokens ({share:.1%}), "
            f"at the cost of {total['uses_lost']:,} of {total['used']:,} uses."
        )
    advice = recommendation(data)
    if advice:
        out.append(advice)
    if data.windows_note:
        out.append(data.windows_note)
        return out
    violations = int(data.per_run["wire_violations"].sum())
    ours = (
        "Every window replayed under agentfootprint's policies is one a provider accepts"
        if violations == 0
        else f"{violations:,} window(s) replayed under agentfootprint's policies would be "
        "rejected by a provider (see the window-policy chart)"
    )
    frameworks = data.audit.filter(~pl.col("policy").is_in(data.policies))
    others = (
        frameworks.group_by("policy", maintain_order=True)
        .agg(pl.col("wire_problems").sum())
        .filter(pl.col("wire_problems") > 0)
        .sort("wire_problems", descending=True, maintain_order=True)
    )
    if others.height:
        most = [f"{row['policy']} ({row['wire_problems']:,})" for row in others.head(2).to_dicts()]
        compared = frameworks["policy"].n_unique()
        ours += (
            f"; {others.height} of the other frameworks' {compared} policies would send windows "
            f"a provider rejects, most often {' and '.join(most)} wire problems "
            "(the cost chart names each)"
        )
    out.append(ours + ".")
    return out


def recommendation(data: ReportData) -> str | None:
    """The window policy a user would pick, with the trade-off in numbers.

    The baseline keeps everything (``none``; when it was not compared, the policy
    bringing the most facts). Recommended: the windowed policy with the fewest input
    tokens among those bringing at least :data:`NEARLY_ALL_FACTS` of the baseline's
    facts to the answer turn (rounded up: with 6 facts, all 6). With no fact declared
    (no standings), none is recommended: facts kept cannot be weighed. The pick weighs
    input tokens, not a prompt cache; the sentence says what the pick costs with one
    against the baseline (the audit's ``cost_with_cache``), since a window that moves
    breaks the cached prefix and may cost more than keeping everything.

    >>> from contextledger.report.data import collect
    >>> advice = recommendation(collect(policies=["none", "sliding:keep=3", "sliding:keep=6"]))
    >>> advice.split(":")[0], advice.split(": ")[2]
    ('Recommended window policy', '6 of 6 declared facts (none')
    """
    return _advice(data)[0]


def named_policy(data: ReportData) -> str | None:
    """The policy the findings name (:func:`recommendation`): the one recommended, else
    the closest to it, else the cheapest; the window charts draw its row apart.

    >>> from contextledger.report.data import collect
    >>> named_policy(collect(policies=["none", "sliding:keep=3", "sliding:keep=6"]))
    'sliding:keep=6'
    """
    return _advice(data)[1]


def _advice(data: ReportData) -> tuple[str | None, str | None]:
    """:func:`recommendation`'s sentence and the policy it names."""
    kinds = {label: policy.kind for label, policy in parse_policies(data.policies)}
    policies = data.per_policy.join(
        pl.DataFrame({"policy": list(kinds), "kind": list(kinds.values())}),
        on="policy",
        how="left",
        maintain_order="left",
    )
    if policies.height == 0:
        return None, None
    declared = int(policies.select(pl.col("facts_declared_total").max()).item() or 0)
    facts, tokens = "answer_facts_verbatim_total", "input_tokens_total"
    everything = policies.filter(pl.col("kind") == "none")
    if everything.height == 0:
        everything = policies.sort(facts, descending=True, maintain_order=True)
    base = everything.row(0, named=True)
    windowed = policies.filter(pl.col("kind") != "none").sort(tokens, maintain_order=True)
    if windowed.height == 0:
        return None, None
    if not declared:
        cheapest = windowed.row(0, named=True)
        return (
            "No tool result was declared a fact (give --standings, or runs whose findings "
            "ledger files them), so no window policy is recommended on the facts it keeps; "
            f"the cheapest compared, {cheapest['policy']}, sends "
            f"~{cheapest[tokens]:,} input tokens instead of ~{base[tokens]:,} "
            f"({base['policy']}{_fewer(cheapest[tokens], base[tokens])})."
            f"{_with_cache(data, cheapest['policy'], base['policy'])}"
        ), cheapest["policy"]
    needed = math.ceil(NEARLY_ALL_FACTS * base[facts] - 1e-9)
    source = "keeping everything" if base["kind"] == "none" else "the policy bringing the most"
    rule = (
        f"at least {NEARLY_ALL_FACTS:.0%} of the facts {source} ({base['policy']}) brings "
        "to the answer turn"
    )
    enough = windowed.filter(pl.col(facts) >= needed)
    if enough.height == 0:
        closest = windowed.sort(facts, descending=True, maintain_order=True).row(0, named=True)
        return (
            f"No window policy compared brings {rule} (that is, {needed:,} or more of the "
            f"{base[facts]:,} facts {base['policy']} brings): the closest, "
            f"{closest['policy']}, brings {closest[facts]:,} "
            f"({base['policy']}: {base[facts]:,}) for ~{closest[tokens]:,} input tokens "
            f"instead of ~{base[tokens]:,}{_fewer(closest[tokens], base[tokens], ' (', ')')}."
            f"{_with_cache(data, closest['policy'], base['policy'])}"
        ), closest["policy"]
    pick = enough.row(0, named=True)
    versus = (
        ""
        if pick["policy"] == base["policy"]
        else f" instead of ~{base[tokens]:,}{_fewer(pick[tokens], base[tokens], ' (', ')')}"
    )
    return (
        f"Recommended window policy: {pick['policy']}, the cheapest compared that brings "
        f"{rule}: {pick[facts]:,} of {declared:,} declared facts ({base['policy']}: "
        f"{base[facts]:,}) for ~{pick[tokens]:,} input tokens{versus}."
        f"{_with_cache(data, pick['policy'], base['policy'])}"
    ), pick["policy"]


def _with_cache(data: ReportData, policy: str, base: str) -> str:
    """What ``policy`` costs with a prompt cache against ``base`` (the audit's
    ``cost_with_cache`` summed over the runs it prices), said because the pick weighs
    input tokens only; '' when either was not audited or priced, or they are one policy.
    """
    if policy == base or data.audit.height == 0:
        return ""
    costs = data.audit.group_by("policy").agg(
        pl.col("cost_with_cache").sum(), pl.col("cost_with_cache").is_not_null().sum().alias("n")
    )
    found = {row["policy"]: row for row in costs.to_dicts()}
    if policy not in found or base not in found or not found[policy]["n"] or not found[base]["n"]:
        return ""
    mine, theirs = found[policy]["cost_with_cache"], found[base]["cost_with_cache"]
    if mine > theirs:
        return (
            f" Input tokens are not the whole cost: with a prompt cache it costs "
            f"~{mine:,.0f} against ~{theirs:,.0f} for {base} ({(mine - theirs) / theirs:.1%} "
            "more), as a window that drops or rewrites messages breaks the cached prefix "
            "(see the cost chart)."
        )
    return (
        f" With a prompt cache it costs less too: ~{mine:,.0f} against ~{theirs:,.0f} for "
        f"{base} (see the cost chart)."
    )


def _fewer(tokens: int, base: int, before: str = ", ", after: str = "") -> str:
    """How many fewer input tokens, as a share of the baseline's."""
    if not base or tokens == base:
        return ""
    share = abs(base - tokens) / base
    return f"{before}{share:.1%} {'fewer' if tokens < base else 'more'}{after}"
