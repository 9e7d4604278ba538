"""The footprintjs commit-log fold: the value of a state key at any bundle.

Everything contextledger reads from a snapshot rests on this. It reproduces
footprintjs 9.24 ``commitValueAt`` / ``findLastWriter`` exactly, including the
quirks: an ``append`` onto a non-array replaces the value with the tail, a
``merge`` deduplicates primitive array items, and a key written only in the
initial state folds from absent. ``ABSENT`` stands for JavaScript ``undefined``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from contextledger.read.snapshot import Bundle

#: Separator footprintjs joins nested path segments with.
PATH_DELIM = "\u001f"

_DENIED_SEGMENTS = frozenset({"__proto__", "constructor", "prototype"})


class _Absent:
    """JavaScript ``undefined``: a key never written, or deleted."""

    _instance: _Absent | None = None

    def __new__(cls) -> _Absent:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "ABSENT"

    def __bool__(self) -> bool:
        return False


ABSENT: Any = _Absent()


def native_get(obj: Any, segments: Sequence[str]) -> Any:
    """footprintjs ``nativeGet``: own properties only, guarded segments, else ABSENT."""
    current = obj
    for segment in segments:
        if current is None or current is ABSENT:
            return ABSENT
        if segment in _DENIED_SEGMENTS:
            return ABSENT
        if isinstance(current, dict):
            if segment not in current:
                return ABSENT
            current = current[segment]
        elif isinstance(current, list):
            if not segment.isdigit() or int(segment) >= len(current):
                return ABSENT
            current = current[int(segment)]
        else:
            return ABSENT
    return current


def _same_value_zero_key(item: Any) -> tuple[str, Any] | None:
    """Identity of a primitive under JavaScript ``Set`` (None: an object, never equal)."""
    if isinstance(item, bool):
        return ("bool", item)
    if isinstance(item, int | float):
        if item != item:  # NaN equals NaN in a Set
            return ("number", "NaN")
        return ("number", float(item))
    if isinstance(item, str):
        return ("string", item)
    if item is None:
        return ("null", None)
    if item is ABSENT:
        return ("undefined", None)
    return None


def deep_smart_merge(dst: Any, src: Any) -> Any:
    """footprintjs ``deepSmartMerge``: objects merge key by key, arrays union."""
    if src is None or src is ABSENT or not isinstance(src, dict | list):
        return src
    if isinstance(src, list):
        if not src:
            return []  # an empty array clears, it is not a no-op
        if not isinstance(dst, list):
            return list(src)
        seen: set[tuple[str, Any]] = set()
        merged = []
        for item in [*dst, *src]:
            key = _same_value_zero_key(item)
            if key is not None:
                if key in seen:
                    continue
                seen.add(key)
            merged.append(item)
        return merged
    if isinstance(dst, dict):
        out = dict(dst)
    elif isinstance(dst, list):
        out = {str(i): v for i, v in enumerate(dst)}
    else:
        out = {}
    for key, value in src.items():
        out[key] = deep_smart_merge(out.get(key, ABSENT), value)
    return out


def apply_verb(value: Any, verb: str, bundle: Bundle, segments: Sequence[str]) -> Any:
    """One step of the fold: the key's value after ``bundle`` applied ``verb`` to it."""
    if verb == "set":
        return native_get(bundle.overwrite, segments)
    if verb == "delete":
        return ABSENT
    if verb == "append":
        tail = native_get(bundle.overwrite, segments)
        if isinstance(value, list) and isinstance(tail, list):
            return [*value, *tail]
        return tail
    return deep_smart_merge(value, native_get(bundle.updates, segments))


def commit_value_at(
    log: Sequence[Bundle], index: int, key: str, *, writers: Sequence[int] | None = None
) -> Any:
    """The value of ``key`` as of bundle ``index`` (inclusive); ABSENT if never written.

    ``writers``: the positions of the bundles whose trace touches ``key``, in order, when
    known (:class:`~contextledger.read.slice.LogIndex`): only those are visited.

    Examples
    --------
    >>> from contextledger.read.snapshot import Bundle, TraceEntry
    >>> log = [
    ...     Bundle(trace=[TraceEntry("h", "set")], overwrite={"h": [1]}),
    ...     Bundle(trace=[TraceEntry("h", "append")], overwrite={"h": [2, 3]}),
    ... ]
    >>> commit_value_at(log, 1, "h")
    [1, 2, 3]
    """
    end = min(index, len(log) - 1)
    bundles = log[: end + 1] if writers is None else [log[at] for at in writers if at <= end]
    touches = [
        (entry.verb, bundle) for bundle in bundles for entry in bundle.trace if entry.path == key
    ]
    if not touches:
        return ABSENT
    start = 0
    for position in range(len(touches) - 1, -1, -1):
        if touches[position][0] in ("set", "delete"):
            start = position
            break
    segments = key.split(PATH_DELIM)
    value: Any = ABSENT
    for verb, bundle in touches[start:]:
        value = apply_verb(value, verb, bundle, segments)
    return value


def find_last_writer(log: Sequence[Bundle], key: str, before: int | None = None) -> int | None:
    """Index of the last bundle before ``before`` whose trace touches ``key``."""
    end = len(log) if before is None else before
    for position in range(end - 1, -1, -1):
        if any(entry.path == key for entry in log[position].trace):
            return position
    return None


class ForwardFold:
    """Fold chosen keys forward through a log in one pass.

    Equivalent to calling :func:`commit_value_at` at every bundle (a ``set`` or
    ``delete`` anchors the value, so folding from the start gives the same
    answer) at O(log length) instead of O(length squared).
    """

    def __init__(self, keys: Iterable[str]) -> None:
        self._segments = {key: key.split(PATH_DELIM) for key in keys}
        self.values: dict[str, Any] = dict.fromkeys(self._segments, ABSENT)

    def step(self, bundle: Bundle) -> None:
        """Apply one bundle to the folded keys it writes."""
        for entry in bundle.trace:
            segments = self._segments.get(entry.path)
            if segments is not None:
                self.values[entry.path] = apply_verb(
                    self.values[entry.path], entry.verb, bundle, segments
                )
