"""What every framework policy shares: the spec grammar's pieces, token estimates, helpers.

A framework spec is ``name:key=value,key=value``; a list value is written with ``|``
(``exclude_tools=search|fetch``), a switch as ``true``/``false``, a number whole and at
most ``MAX_SPEC_NUMBER`` (agentfootprint's bound). Each policy class lists
its keys (:class:`Key`); one parser (:func:`parse_params`) checks them all, so a bad spec
is refused the same way whichever framework it names.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from contextledger.read.messages import Message, RunMessages
from contextledger.window.frameworks._history import RunHistory
from contextledger.window.frameworks._history import TokensOf as TokensOf  # re-exported
from contextledger.window.policies import MAX_SPEC_NUMBER, PolicySpecError


class FrameworkSpecError(PolicySpecError):
    """A framework policy spec that cannot be parsed: names the spec, the key, what is allowed.

    A :class:`PolicySpecError`, so every caller that refuses a bad ``--policy`` refuses
    these too; its message lists the framework's keys rather than agentfootprint's.
    """

    def __init__(self, spec: str, problem: str, allowed: str) -> None:
        self.spec = spec
        ValueError.__init__(self, f"window policy {spec!r}: {problem} ({allowed})")


@dataclass(frozen=True)
class Key:
    """One key a framework spec takes: its kind, its default (None: required), its meaning."""

    name: str
    #: ``int``, ``bool``, ``names`` (a ``|`` list), ``choice`` (one of ``choices``),
    #: ``bool_or_names``, or ``condition`` (``N`` or ``kind:N`` alternatives with ``|``).
    kind: str
    default: Any
    doc: str
    minimum: int = 0
    choices: tuple[str, ...] = ()
    #: For ``condition``: the kinds ``kind:N`` may name; the bare ``N`` is ``bare``.
    bare: str = "tokens"
    required: bool = False

    def shown(self, value: Any) -> str | None:
        """The value as a spec spells it (None: left out of the canonical spec)."""
        if value is None:
            return None
        if self.kind == "bool":
            return "true" if value else "false"
        if self.kind == "names":
            return "|".join(value) if value else None
        if self.kind == "bool_or_names":
            if isinstance(value, bool):
                return "true" if value else "false"
            return "|".join(value)
        if self.kind == "condition":
            return "|".join(f"{k}:{n}" if k != "int" else str(n) for k, n in value)
        return str(value)

    @property
    def default_text(self) -> str:
        """The default as docs/window-policies.md's table shows it."""
        if self.required:
            return "required"
        shown = self.shown(self.default)
        if shown is None:
            return "all tools" if self.kind == "names" and self.name == "exclude" else "none"
        return shown


def describe(name: str, keys: Sequence[Key]) -> str:
    """What a framework spec allows, for its refusals."""
    parts = []
    for key in keys:
        form = {
            "int": f"{key.name}=N (whole, {key.minimum} to {MAX_SPEC_NUMBER})",
            "bool": f"{key.name}=true|false",
            "names": f"{key.name}=a|b",
            "choice": f"{key.name}={'|'.join(key.choices)}",
            "bool_or_names": f"{key.name}=true|false or a|b",
            "condition": f"{key.name}=N or {'|'.join(c + ':N' for c in key.choices)} "
            f"(N whole, {key.minimum} to {MAX_SPEC_NUMBER})",
        }[key.kind]
        parts.append(form + (" (required)" if key.required else ""))
    return f"{name} takes " + ", ".join(parts)


def _whole(spec: str, key: Key, text: str, allowed: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise FrameworkSpecError(
            spec, f"{key.name}={text!r} is not a whole number", allowed
        ) from None
    if value < minimum:
        raise FrameworkSpecError(spec, f"{key.name}={value} is below {minimum}", allowed)
    if value > MAX_SPEC_NUMBER:
        raise FrameworkSpecError(spec, f"{key.name}={value} is above {MAX_SPEC_NUMBER}", allowed)
    return value


def _switch(text: str) -> bool | None:
    lowered = text.lower()
    if lowered in ("true", "yes", "1"):
        return True
    if lowered in ("false", "no", "0"):
        return False
    return None


def _names(text: str) -> tuple[str, ...]:
    seen: list[str] = []
    for part in text.split("|"):
        part = part.strip()
        if part and part not in seen:
            seen.append(part)
    return tuple(seen)


def parse_params(spec: str, name: str, keys: Sequence[Key], rest: str) -> dict[str, Any]:
    """The keyword arguments a framework spec's ``key=value`` list gives, checked."""
    allowed = describe(name, keys)
    by_name = {key.name: key for key in keys}
    given: dict[str, str] = {}
    if rest.strip():
        for item in rest.split(","):
            key_text, eq, value = item.partition("=")
            key_text = key_text.strip().lower()
            if not eq or not key_text or not value.strip():
                raise FrameworkSpecError(spec, f"{item.strip()!r} is not key=value", allowed)
            if key_text not in by_name:
                raise FrameworkSpecError(spec, f"{name} does not take {key_text}", allowed)
            if key_text in given:
                raise FrameworkSpecError(spec, f"{key_text} is given twice", allowed)
            given[key_text] = value.strip()
    out: dict[str, Any] = {}
    for key in keys:
        if key.name not in given:
            if key.required:
                raise FrameworkSpecError(spec, f"{name} needs {key.name}= (no default)", allowed)
            continue
        text = given[key.name]
        if key.kind == "int":
            out[key.name] = _whole(spec, key, text, allowed, key.minimum)
        elif key.kind == "bool":
            switch = _switch(text)
            if switch is None:
                raise FrameworkSpecError(spec, f"{key.name}={text!r} is not true or false", allowed)
            out[key.name] = switch
        elif key.kind == "names":
            out[key.name] = _names(text)
        elif key.kind == "bool_or_names":
            switch = _switch(text)
            out[key.name] = switch if switch is not None else _names(text)
        elif key.kind == "choice":
            choice = text.lower().replace("-", "_")
            if choice not in key.choices:
                raise FrameworkSpecError(spec, f"{key.name}={text!r} is not allowed", allowed)
            out[key.name] = choice
        else:  # condition
            conditions = []
            for part in text.split("|"):
                kind, colon, number = part.strip().partition(":")
                if not colon:
                    kind, number = "int", kind
                kind = kind.strip().lower()
                if kind != "int" and kind not in key.choices:
                    raise FrameworkSpecError(
                        spec, f"{key.name}={text!r}: {kind!r} is not a kind it takes", allowed
                    )
                conditions.append((kind, _whole(spec, key, number.strip(), allowed, key.minimum)))
            out[key.name] = tuple(conditions)
    return out


def canonical_spec(name: str, keys: Sequence[Key], values: Mapping[str, Any]) -> str:
    """``name:key=value,...`` with every key that has a value spelled out, in key order."""
    parts = []
    for key in keys:
        shown = key.shown(values[key.name])
        if shown is not None:
            parts.append(f"{key.name}={shown}")
    return f"{name}:{','.join(parts)}" if parts else name


# ── token estimates ────────────────────────────────────────────────


def estimated_tokens_of(stream: RunMessages | None = None) -> TokensOf:
    """An **estimate** of a message's tokens from its content length (UTF-16 units).

    At the run's own rate (reported input tokens per served-window char,
    :meth:`RunMessages.tokens_per_char`) where the stream has one, else chars / 4.
    Only the content is measured, as the run's rate is: a tool call's arguments add
    nothing of their own.
    """
    return tokens_at_rate(stream.tokens_per_char() if stream is not None else None)


def tokens_at_rate(rate: float | None) -> TokensOf:
    """:func:`estimated_tokens_of` a stream whose ``tokens_per_char()`` is ``rate`` (for a
    caller that measured it once for several replays)."""
    if rate is None:
        return lambda m: math.ceil(m.chars / 4)
    return lambda m: round(rate * m.chars)


def total_tokens(messages: Sequence[Message], tokens_of: TokensOf) -> int:
    return sum(map(tokens_of, messages))


# ── message helpers ────────────────────────────────────────────────


#: Rewritten messages kept for reuse: a policy that edits the full history afresh at
#: every call rewrites the same messages again; the same copy back is both cheaper and
#: what the audit finds at C speed (a window's prefix shared by identity). Keyed by the
#: message itself (compared by identity, held while cached) and the edit.
_REWRITES_KEPT = 4096


@functools.lru_cache(maxsize=_REWRITES_KEPT)
def rewritten(message: Message, content: str, edit: str | None) -> Message:
    """``message`` with new content, marked with how a policy rewrote it (the same copy
    for the same rewrite of the same message: copies are never changed)."""
    raw = dict(message.raw) if message.raw is not None else None
    if raw is not None:
        raw["content"] = content
    return replace(message, content=content, raw=raw, edit=edit, stored_chars=None)


def with_calls_args_cleared(message: Message, call_ids: set[str]) -> Message:
    """An assistant message whose calls in ``call_ids`` carry empty arguments."""
    return _with_calls_args_cleared(message, frozenset(call_ids))


@functools.lru_cache(maxsize=_REWRITES_KEPT)
def _with_calls_args_cleared(message: Message, call_ids: frozenset[str]) -> Message:
    raw: dict[str, Any] = dict(message.raw) if message.raw is not None else {"role": message.role}
    calls = raw.get("toolCalls")
    if isinstance(calls, list):
        raw["toolCalls"] = [
            {**call, "args": {}} if isinstance(call, dict) and call.get("id") in call_ids else call
            for call in calls
        ]
    return replace(message, raw=raw, edit="placeholder")


def standin(content: str, tokens: int, tokens_of: TokensOf, edit: str | None) -> Message:
    """A message a policy authored, padded so ``tokens_of`` counts about ``tokens`` for it.

    The padding is calibrated through ``tokens_of`` itself (it is assumed linear in
    the content's length), so the stand-in weighs what it says whatever the counter.
    """
    probe = Message("user", "." * 4000)
    per_char = tokens_of(probe) / 4000 or 0.25
    wanted = max(len(content), round(tokens / per_char)) if tokens > 0 else len(content)
    padded = (
        content + " " + "." * max(0, wanted - len(content) - 1)
        if wanted > len(content)
        else content
    )
    return Message("user", padded, window_authored=True, edit=edit)


def call_names(messages: Sequence[Message]) -> dict[str, str]:
    """Tool name by call id, from the assistant messages in ``messages``."""
    names: dict[str, str] = {}
    for message in messages:
        for call in message.tool_calls:
            if call.id and call.name:
                names.setdefault(call.id, call.name)
    return names


class FrameworkPolicy:
    """What every framework policy is: a frozen dataclass of its keys, plus these.

    ``window(history, tokens_of=...)`` is the request the framework would send at a
    call given the history recorded so far. A framework that writes its edits back to
    the history it keeps (a summary that replaces messages, a limiter that deletes
    them) overrides :meth:`advance`, which also returns the history kept for the
    next call; the others transform the full history afresh at every call.
    """

    NAME: str = ""
    KEYS: tuple[Key, ...] = ()
    #: Where its semantics were read (version and file or page), for the docs' table.
    SOURCE: str = ""

    @property
    def name(self) -> str:
        return self.NAME

    @property
    def spec(self) -> str:
        """The canonical spec string (every key that has a value spelled out)."""
        return canonical_spec(
            self.NAME, self.KEYS, {k.name: getattr(self, k.name) for k in self.KEYS}
        )

    def __str__(self) -> str:
        return self.spec

    @property
    def reads_tool_text(self) -> bool:
        """Whether it measures or copies tool outputs' text (not only their length): an
        archive keeps their length only, so it cannot be replayed over one."""
        return False

    def window(self, history: Sequence[Message], *, tokens_of: TokensOf) -> list[Message]:
        raise NotImplementedError

    def advance(
        self, history: Sequence[Message], *, tokens_of: TokensOf
    ) -> tuple[list[Message], list[Message]]:
        """``(window served, history kept for the next call)``; stateless by default."""
        return self.window(history, tokens_of=tokens_of), list(history)

    def replay(self, run: RunHistory) -> tuple[list[list[Message]], list[Message]]:
        """``(window served at each call, history kept after the last call)`` over a run.

        A stateless policy (one that keeps :meth:`advance`) serves :meth:`window_at` of
        each call's shared history; the others carry the history they keep from call to
        call. Windows may be lists shared with other policies' replays: never changed.
        """
        if type(self).advance is FrameworkPolicy.advance:
            served = [self.window_at(run, call) for call in range(len(run.histories))]
            return served, list(run.histories[-1]) if run.histories else []
        history: list[Message] = []
        served = []
        for entering in run.entered:
            history = history + entering
            window, history = self.advance(history, tokens_of=run.tokens_of)
            served.append(window)
        return served, history

    def window_at(self, run: RunHistory, call: int) -> list[Message]:
        """:meth:`window` of the history the call at position ``call`` sees; a policy
        overrides it where the run's shared measures answer faster (the same window)."""
        return self.window(run.histories[call], tokens_of=run.tokens_of)

    @classmethod
    def from_params(cls, spec: str, rest: str) -> FrameworkPolicy:
        return cls(**parse_params(spec, cls.NAME, cls.KEYS, rest))
