"""Say what the recorded trace files actually carry: ``python record/otel/inventory.py data/otel``.

Per file: lines, traces, spans, instrumentation scopes and schema URLs, and for each span
kind of operation the attribute keys with the OTLP value types they arrive in. The README's
inventory is written from this output, not from the instrumentations' documentation.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path


def _lines(path: Path) -> list[str]:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return raw.decode().splitlines()


def _kind(span: dict, attrs: dict) -> str:
    for key in ("gen_ai.operation.name", "openinference.span.kind"):
        if key in attrs:
            return f"{key}={next(iter(attrs[key].values()))}"
    return f"name={span['name']}"


def main() -> None:
    for path in sorted(Path(sys.argv[1]).glob("*.jsonl*")):
        lines = _lines(path)
        traces: set[str] = set()
        scopes: Counter[str] = Counter()
        keys: dict[str, Counter[str]] = defaultdict(Counter)
        spans_per_kind: Counter[str] = Counter()
        dropped = 0
        for line in lines:
            for resource_spans in json.loads(line)["resourceSpans"]:
                for scope_spans in resource_spans["scopeSpans"]:
                    scope = scope_spans.get("scope", {})
                    schema = scope_spans.get("schemaUrl", "-")
                    label = f"{scope.get('name')} {scope.get('version', '-')} schema={schema}"
                    for span in scope_spans["spans"]:
                        scopes[label] += 1
                        traces.add(span["traceId"])
                        attrs = {a["key"]: a["value"] for a in span.get("attributes", [])}
                        dropped += span.get("droppedAttributesCount", 0)
                        kind = _kind(span, attrs)
                        spans_per_kind[kind] += 1
                        for key, value in attrs.items():
                            generic = re.sub(r"\.\d+\.", ".{i}.", key)
                            keys[kind][f"{generic}:{'/'.join(value)}"] += 1
        print(
            f"## {path.name}: {len(lines)} lines, {len(traces)} traces, "
            f"{sum(scopes.values())} spans, dropped attributes {dropped}"
        )
        for label, count in scopes.items():
            print(f"  scope {label}: {count} spans")
        for kind, count in spans_per_kind.items():
            print(f"  {kind} ({count} spans):")
            for key, seen in sorted(keys[kind].items()):
                print(f"    {key} ({seen})")


if __name__ == "__main__":
    main()
