"""The synthetic agents: their pieces (injections, skills, tools), what each agent offers
and calls, and how often it runs, all drawn from a seed.

Apart from :mod:`.synth_model` (which draws the runs of these agents) because the
population is drawn once per seed and cached, and every run is drawn from it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

_VERBS = (
    "get",
    "fetch",
    "lookup",
    "search",
    "list",
    "create",
    "update",
    "delete",
    "send",
    "read",
    "write",
    "run",
    "sync",
    "rotate",
    "page",
    "translate",
    "geo",
    "diff",
    "build",
    "shred",
    "archive",
    "approve",
    "refund",
    "notify",
    "score",
)
_NOUNS = (
    "order",
    "invoice",
    "user",
    "account",
    "email",
    "log",
    "sql",
    "host",
    "config",
    "report",
    "file",
    "key",
    "ticket",
    "customer",
    "payment",
    "refund",
    "shipment",
    "calendar",
    "doc",
    "page",
    "metric",
    "alert",
    "incident",
    "policy",
    "quote",
    "contract",
    "asset",
    "vendor",
    "lead",
    "invoice_line",
    "inventory",
)
_TOPICS = (
    "tone",
    "safety",
    "pii",
    "format",
    "citations",
    "escalation",
    "billing",
    "onboarding",
    "security",
    "reporting",
    "triage",
    "legacy",
    "latency",
    "style",
    "brevity",
    "refunds",
    "compliance",
    "locale",
)
KIND_NAMES = np.array(["injection", "skill", "tool"])
INJECTION, SKILL, TOOL = 0, 1, 2


@dataclass
class Population:
    """The agents every synthetic run is drawn from."""

    names: np.ndarray  # piece names (object array), by piece code
    kinds: np.ndarray  # kind code per piece
    tokens: np.ndarray  # approx tokens per piece
    agent_ptr: np.ndarray  # CSR: agent a's offered pieces are [ptr[a], ptr[a+1])
    piece: np.ndarray  # piece code per agent slot, in offer order within a call
    start: np.ndarray  # first call (0-based) the slot is offered at
    tool_ptr: np.ndarray  # CSR: agent a's callable tools (slots into piece/start)
    tool_slot: np.ndarray
    tool_cum: np.ndarray  # cumulative call weight within the agent
    skill_count: np.ndarray  # skills per agent
    injection_count: np.ndarray
    grouped: np.ndarray
    llm_call: np.ndarray
    window_keep: np.ndarray  # turns a window keeps (0: no window)
    quality: np.ndarray
    translator: np.ndarray
    static_tools: np.ndarray
    callable_tools: np.ndarray
    weights: np.ndarray  # how often each agent runs


@functools.cache
def population(seed: int, draws: int, agents: int = 400) -> Population:
    """The agents of stream ``seed`` (``draws``: the model's key to its draws), drawn once."""
    rng = np.random.default_rng([seed, draws, 0])
    tools = [f"{v}_{n}" for v in _VERBS for n in _NOUNS]
    rng.shuffle(tools)
    injections = [
        f"{family}-{topic}-{n}"
        for family in ("always", "rule", "fact", "steering", "on")
        for topic in _TOPICS
        for n in range(1, 9)
    ]
    rng.shuffle(injections)
    skills = [f"{topic}-{n}" for topic in _TOPICS for n in range(1, 7)]
    names = np.array([*injections, *skills, *tools], dtype=object)
    kinds = np.repeat([INJECTION, SKILL, TOOL], [len(injections), len(skills), len(tools)])
    tokens = np.concatenate(
        [
            np.clip(rng.lognormal(np.log(75), 0.5, len(injections)), 8, 600),
            np.clip(rng.lognormal(np.log(180), 0.4, len(skills)), 30, 900),
            np.clip(rng.lognormal(np.log(85), 0.45, len(tools)), 15, 500),
        ]
    ).astype(np.int64)
    base_skill, base_tool = len(injections), len(injections) + len(skills)
    popularity = 1.0 / np.arange(1, len(tools) + 1) ** 0.8
    popularity /= popularity.sum()

    ptr, piece, start = [0], [], []
    tool_ptr, tool_slot, tool_cum = [0], [], []
    skill_count, injection_count, static_counts = [], [], []
    llm_call = rng.random(agents) < 0.013
    grouped = (rng.random(agents) < 0.2) | llm_call
    for agent in range(agents):
        slots: list[tuple[int, int]] = []
        always = int(rng.integers(0, 4 if not llm_call[agent] else 3))
        rules = int(rng.integers(0, 3)) if not llm_call[agent] else 0
        picks = rng.choice(len(injections), always + rules, replace=False)
        slots += [(int(p), 0) for p in picks[:always]]
        slots += [(int(p), int(rng.integers(1, 6))) for p in picks[always:]]
        injection_count.append(len(picks))
        n_skills = int(rng.integers(1, 4)) if rng.random() < 0.25 and not llm_call[agent] else 0
        slots += [(base_skill + int(p), 0) for p in rng.choice(len(skills), n_skills, False)]
        skill_count.append(n_skills)
        n_static = 0 if llm_call[agent] else int(rng.choice(9, p=_STATIC_TOOL_SHARE))
        static = rng.choice(len(tools), n_static, replace=False, p=popularity)
        static_counts.append(n_static)
        dynamic = (
            rng.choice(len(tools), int(rng.integers(1, 4)), replace=False)
            if rng.random() < 0.19 and not llm_call[agent]
            else np.array([], dtype=np.int64)
        )
        first_tool = len(slots)
        slots += [(base_tool + int(p), 0) for p in static]
        slots += [(base_tool + int(p), int(rng.integers(1, 5))) for p in dynamic]
        for p, s in slots:
            piece.append(p)
            start.append(s)
        # About half the static tools are ever called; called ones are skewed.
        weights = rng.pareto(1.2, len(slots) - first_tool) * (
            rng.random(len(slots) - first_tool) < 0.55
        )
        if len(weights) and weights.sum() == 0:
            weights[0] = 1.0
        for offset, weight in enumerate(weights):
            if weight > 0:
                tool_slot.append(ptr[-1] + first_tool + offset)
                tool_cum.append(weight)
        called = len(tool_slot) - tool_ptr[-1]
        if called:
            block = np.array(tool_cum[-called:])
            tool_cum[-called:] = list(np.cumsum(block) / block.sum())
        tool_ptr.append(len(tool_slot))
        ptr.append(len(piece))
    window = rng.choice(3, agents, p=[0.37, 0.46, 0.17])
    keep = np.where(window == 0, 0, rng.integers(2, 9, agents))
    return Population(
        names=names,
        kinds=kinds,
        tokens=tokens,
        agent_ptr=np.array(ptr),
        piece=np.array(piece, dtype=np.int64),
        start=np.array(start, dtype=np.int64),
        tool_ptr=np.array(tool_ptr),
        tool_slot=np.array(tool_slot, dtype=np.int64),
        tool_cum=np.array(tool_cum),
        skill_count=np.array(skill_count),
        injection_count=np.array(injection_count),
        grouped=grouped,
        llm_call=llm_call,
        window_keep=keep,
        quality=rng.beta(5, 2, agents),
        translator=rng.random(agents) < 0.5,
        static_tools=np.array(static_counts),
        callable_tools=np.diff(np.array(tool_ptr)),
        weights=(w := 1.0 / np.arange(1, agents + 1) ** 1.1) / w.sum(),
    )


#: Static tools per agent, 0..8 (the corpus: 999 static tools over 297 Agent runs).
_STATIC_TOOL_SHARE = np.array([0.10, 0.12, 0.16, 0.18, 0.16, 0.12, 0.08, 0.05, 0.03])


def piece_names(pop: Population) -> pa.Array:
    """Every piece's name, by piece code, as Arrow strings."""
    return pa.array(pop.names.tolist(), pa.string())
