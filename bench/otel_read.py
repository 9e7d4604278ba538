"""Reading OpenTelemetry traces: runs/s and MB/s on one core, against a plain loop.

The input is the recorded traces of ``data/otel`` repeated until the file is
``--mb`` megabytes (each copy's trace, span and conversation ids rewritten, so every
copy is runs of its own). Measured, each the median of repetitions filling about
``--seconds`` (the two taking turns, so both see the same load), one core each:

- ``contextledger``: ``read_runs`` of the file (decode, records, runs assembled across
  lines, the run/offer/use tables): what ``contextledger ledger`` reads.
- ``json.loads loop``: ``json.loads`` of every line, every span's attributes made a dict,
  and every field the reader's span record carries taken from it (:func:`plain_loop`
  lists them: ids, times, roles, token counts, tools offered with their estimates,
  tool calls, executions), spans grouped by trace: the same fields, read the obvious
  way. It does less than the reader (no problems named, no runs assembled, no tables).

``--save-rows PATH`` writes the tables ``read_runs`` gives for the timed file (runs,
offers, uses, problems as Arrow IPC); ``--check-rows PATH`` compares them with a file
saved before, exactly (a change to the reader must give the same rows).

``--memory-mb 256 1024 2048`` also writes files that large and reads each in a fresh
process, reporting its peak resident set: the trace reader alone (runs assembled and
let go of) and ``read_runs`` (whose tables grow with the runs). Past a budget of span
records (``--spans-held``, default 8192) the reader writes them to temporary files, so
what it holds does not grow with the input. ``--compare-src ../main/src`` measures
another checkout's package beside this one.
Run: ``.venv/bin/python bench/otel_read.py [--mb 50] [--seconds 5] [--memory-mb 256 1024]``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

from contextledger.read.otel import sniff
from contextledger.tables.build import RunTables, read_runs

REPO = Path(__file__).resolve().parents[1]
OTEL = REPO / "data" / "otel"
_IDS = re.compile(rb'"(traceId|spanId|parentSpanId)":"([0-9a-f]{8})')
_CONVERSATION = re.compile(
    rb'("(?:gen_ai\.conversation\.id|session\.id)","value":\{"stringValue":")'
)


def recorded_lines() -> list[bytes]:
    lines = []
    for path in sorted(OTEL.rglob("*")):
        if path.is_file() and sniff(path) == "otlp-json":
            data = path.read_bytes()
            if data[:2] == b"\x1f\x8b":
                data = gzip.decompress(data)
            lines.extend(line for line in data.splitlines() if line.strip())
    return lines


def write_traces(path: Path, megabytes: int) -> int:
    """The recorded lines repeated into ``path`` up to ``megabytes``; how many copies."""
    lines = recorded_lines()
    target = megabytes << 20
    written = copy = 0
    with path.open("wb") as handle:
        while written < target:
            prefix = b"%08x" % copy
            for line in lines:
                copied = _IDS.sub(b'"\\1":"' + prefix, line)
                copied = _CONVERSATION.sub(b"\\g<1>" + prefix + b"-", copied)
                handle.write(copied + b"\n")
                written += len(copied) + 1
            copy += 1
    return copy


_CALL_OPERATIONS = ("chat", "generate_content", "text_completion")
_CONTENT_KEYS = (
    "gen_ai.tool.definitions",
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
)


def _plain_value(value: dict) -> object:
    """An OTLP ``AnyValue`` as a Python value, the obvious recursive way."""
    for kind, inner in value.items():
        if kind == "arrayValue":
            return [_plain_value(item) for item in inner.get("values", [])]
        if kind == "kvlistValue":
            return {kv["key"]: _plain_value(kv.get("value", {})) for kv in inner.get("values", [])}
        if kind == "intValue":
            return int(inner)
        return inner
    return None


def _estimate(definition: object) -> int:
    """ceil(UTF-16 length of the compact JSON / 4): the ledger's estimate, done plainly."""
    text = json.dumps(definition, separators=(",", ":"), ensure_ascii=False)
    return math.ceil(len(text.encode("utf-16-le", "surrogatepass")) // 2 / 4)


def _first(attributes: dict, *keys: str) -> object:
    return next((attributes[key] for key in keys if attributes.get(key) is not None), None)


def plain_loop(path: Path) -> int:
    """The baseline: every field the reader's span record carries, read with
    ``json.loads``, spans grouped by trace. Returns the runs (traces) found.

    Per span: trace, span and parent ids, start time, whether it is a model call or a
    tool's execution, conversation and response ids, the input, cache-read and
    cache-write token counts, the tools offered with each one's estimate (semconv's
    ``gen_ai.tool.definitions`` or OpenInference's ``llm.tools.{i}.tool.json_schema``,
    a JSON string or a structured value), the tool calls of the output messages (ids
    and names, both dialects), an execution's call id and tool name, whether content
    was captured, and the attributes dropped. What it does not do that the reader
    does: name problems, merge stacked spans, drop copies, build tables.
    """
    traces: dict[str, list[tuple]] = {}
    with path.open("rb") as handle:
        for line in handle:
            request = json.loads(line)
            for resource_spans in request.get("resourceSpans", []):
                for scope in resource_spans.get("scopeSpans", []):
                    for span in scope.get("spans", []):
                        attributes = {
                            attribute["key"]: _plain_value(attribute.get("value", {}))
                            for attribute in span.get("attributes", [])
                        }
                        offers, calls = [], []
                        definitions = attributes.get("gen_ai.tool.definitions")
                        if isinstance(definitions, str):
                            definitions = json.loads(definitions)
                        for definition in definitions or []:
                            offers.append((definition.get("name"), _estimate(definition)))
                        for key, value in attributes.items():
                            if key.startswith("llm.tools.") and key.endswith(".json_schema"):
                                definition = json.loads(value) if isinstance(value, str) else value
                                name = definition.get("function", {}).get("name")
                                offers.append((name, _estimate(definition)))
                            elif key.startswith("llm.output_messages.") and key.endswith(
                                "tool_call.function.name"
                            ):
                                call_id = attributes.get(key.replace("function.name", "id"))
                                calls.append((call_id, value))
                        outputs = attributes.get("gen_ai.output.messages")
                        if isinstance(outputs, str):
                            outputs = json.loads(outputs)
                        for message in outputs or []:
                            for part in message.get("parts", []):
                                if part.get("type") == "tool_call":
                                    calls.append((part.get("id"), part.get("name")))
                        operation = attributes.get("gen_ai.operation.name")
                        kind = attributes.get("openinference.span.kind")
                        traces.setdefault(span["traceId"], []).append(
                            (
                                span["spanId"],
                                span.get("parentSpanId", ""),
                                int(span.get("startTimeUnixNano", 0)),
                                operation in _CALL_OPERATIONS or kind == "LLM",
                                operation == "execute_tool" or kind == "TOOL",
                                _first(attributes, "gen_ai.conversation.id", "session.id"),
                                attributes.get("gen_ai.response.id"),
                                _first(
                                    attributes,
                                    "gen_ai.usage.input_tokens",
                                    "gen_ai.usage.prompt_tokens",
                                    "llm.token_count.prompt",
                                ),
                                _first(
                                    attributes,
                                    "gen_ai.usage.cache_read.input_tokens",
                                    "gen_ai.usage.cache_read_input_tokens",
                                    "llm.token_count.prompt_details.cache_read",
                                ),
                                _first(
                                    attributes,
                                    "gen_ai.usage.cache_creation.input_tokens",
                                    "gen_ai.usage.cache_write.input_tokens",
                                    "gen_ai.usage.cache_creation_input_tokens",
                                    "llm.token_count.prompt_details.cache_write",
                                ),
                                offers,
                                calls,
                                _first(attributes, "gen_ai.tool.call.id", "tool_call.id"),
                                _first(attributes, "gen_ai.tool.name", "tool.name"),
                                any(key in attributes for key in _CONTENT_KEYS)
                                or any(key.startswith("llm.input_messages.") for key in attributes),
                                span.get("droppedAttributesCount", 0),
                            )
                        )
    return len(traces)


def timed(works: list[Callable[[], object]], seconds: float) -> list[tuple[float, int]]:
    """Median CPU seconds of each of ``works`` (this process's, one core: what a core
    costs, not what waiting for one on a busy machine costs), taking turns, over
    repetitions filling ``seconds``: on a shared machine each sees the same load."""
    times: list[list[float]] = [[] for _ in works]
    started = time.perf_counter()
    while not times[0] or (time.perf_counter() - started < seconds and len(times[0]) < 50):
        for work, spent in zip(works, times, strict=True):
            begin = time.process_time()
            work()
            spent.append(time.process_time() - begin)
    return [(statistics.median(spent), len(spent)) for spent in times]


#: What :func:`peak_memory` runs: ``read_runs`` (the tables, which grow with the runs), or
#: the trace reader alone (runs assembled and let go of, as a consumer that stores them
#: elsewhere would: what the reader itself holds).
_MEMORY_CODE = {
    "read_runs": (
        "from contextledger.tables.build import read_runs\n"
        "runs = read_runs([path], workers=1).runs.num_rows\n"
    ),
    "reader": (
        "from contextledger.tables.build import TraceInputs\n"
        "from contextledger.tables.files import read_file\n"
        "with tempfile.TemporaryDirectory() as folder:\n"
        "    spill = {'spill': SpillTo(folder)} if SpillTo else {}\n"
        "    traces = TraceInputs(['corrected'], **({'spill_folder': folder} if SpillTo else {}))\n"
        "    reads = [read_file(Path(path), ['corrected'], {}, False, **spill)]\n"
        "    runs = sum(len(read.runs) for read in traces.after(reads))\n"
    ),
}


def peak_memory(
    path: Path, *, what: str = "read_runs", src: Path = REPO / "src", spans_held: int | None = None
) -> tuple[float, float, float, int]:
    """Wall and CPU seconds, peak resident MiB and runs of reading ``path`` in a fresh
    process, with the package under ``src`` (another checkout's, to compare), Polars
    and Arrow imported as every command imports them; ``spans_held``: the span records
    held before they spill (read.otel's ``SPANS_HELD``)."""
    code = (
        "import resource, sys, tempfile, time\n"
        "from pathlib import Path\n"
        "import polars, pyarrow\n"
        "try:\n"
        "    from contextledger.read.otel import SpillTo, _spill\n"
        "except ImportError:\n"
        "    SpillTo = None\n"
        "path = sys.argv[1]\n"
        f"if {spans_held!r} is not None:\n"
        f"    _spill.SPANS_HELD = {spans_held!r}\n"
        "before = resource.getrusage(resource.RUSAGE_SELF)\n"
        "cpu_before = before.ru_utime + before.ru_stime\n"
        "begin = time.perf_counter()\n"
        + _MEMORY_CODE[what]
        + "seconds = time.perf_counter() - begin\n"
        "used = resource.getrusage(resource.RUSAGE_SELF)\n"
        "cpu = used.ru_utime + used.ru_stime - cpu_before\n"
        # VmHWM, not ru_maxrss: Linux carries ru_maxrss over exec from the process that
        # started this one (the bench, over 100 MiB), VmHWM is this program's own
        "status = Path('/proc/self/status')\n"
        "lines = status.read_text().splitlines() if status.exists() else []\n"
        "high = [int(line.split()[1]) for line in lines if line.startswith('VmHWM:')]\n"
        "kib = high[0] if high else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "print(seconds, cpu, kib, runs)\n"
    )
    environment = dict(os.environ, PYTHONPATH=str(src))
    out = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        capture_output=True,
        text=True,
        check=True,
        env=environment,
    )
    seconds, cpu, kib, runs = out.stdout.split()
    return float(seconds), float(cpu), int(kib) / 1024, int(runs)


_TABLES = ("runs", "offers", "uses", "problems")


def _comparable(tables: RunTables, name: str) -> pa.Table:
    """One of the tables with each file path cut to the file's name (the bench's file is
    in a temporary folder of a new name each time)."""
    table = getattr(tables, name)
    for column in ("source_path", "path"):
        if column in table.column_names:
            names = [None if p is None else Path(p).name for p in table[column].to_pylist()]
            index = table.column_names.index(column)
            table = table.set_column(index, column, pa.array(names, pa.string()))
    return table


def save_rows(tables: RunTables, path: Path) -> None:
    """The tables ``read_runs`` gave, one Arrow IPC stream after another."""
    with path.open("wb") as handle:
        for name in _TABLES:
            table = _comparable(tables, name)
            with pa.ipc.new_stream(handle, table.schema) as writer:
                writer.write_table(table)


def check_rows(tables: RunTables, path: Path) -> None:
    """Exit with an error unless the tables equal those :func:`save_rows` wrote, exactly."""
    with path.open("rb") as handle:
        for name in _TABLES:
            saved = pa.ipc.open_stream(handle).read_all()
            if not _comparable(tables, name).equals(saved):
                sys.exit(f"the {name} rows differ from {path}")
    print(f"rows identical to {path} ({', '.join(_TABLES)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=int, default=50, help="size of the timed trace file")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument(
        "--memory-mb",
        type=int,
        nargs="*",
        default=[],
        help="also read files this large (MiB) in fresh processes: peak resident memory",
    )
    parser.add_argument(
        "--spans-held", type=int, help="span records held before they spill (default 8192)"
    )
    parser.add_argument(
        "--compare-src",
        type=Path,
        help="also measure the memory of another checkout's package (its src folder)",
    )
    parser.add_argument("--save-rows", type=Path, help="write read_runs' tables here")
    parser.add_argument("--check-rows", type=Path, help="compare read_runs' tables with these")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "traces.jsonl"
        copies = write_traces(path, options.mb)
        size = path.stat().st_size / (1 << 20)
        tables = read_runs([path], workers=1)
        runs = tables.runs.num_rows
        if options.save_rows:
            save_rows(tables, options.save_rows)
        if options.check_rows:
            check_rows(tables, options.check_rows)
        (ours, ours_n), (plain, plain_n) = timed(
            [lambda: read_runs([path], workers=1), lambda: plain_loop(path)], options.seconds
        )
        print(f"{size:,.1f} MiB of OTLP JSON Lines ({copies} copies of data/otel), {runs:,} runs")
        for name, seconds, count in (
            ("contextledger read_runs", ours, ours_n),
            ("json.loads loop", plain, plain_n),
        ):
            print(
                f"  {name:24} {seconds:7.3f} s CPU  {runs / seconds:9,.0f} runs/s  "
                f"{size / seconds:6.1f} MiB/s  (median of {count})"
            )
        print(f"  ratio: {plain / ours:.2f}x the json.loads loop, CPU time on one core each")
        sources = [("this checkout", REPO / "src")]
        if options.compare_src:
            sources.append((str(options.compare_src), options.compare_src))
        if options.memory_mb:
            print("peak resident memory, each read in a fresh process (Polars and Arrow imported):")
        for megabytes in options.memory_mb:
            big = Path(folder) / "big.jsonl"
            write_traces(big, megabytes)
            big_size = big.stat().st_size / (1 << 20)
            for name, src in sources:
                for what in ("reader", "read_runs"):
                    seconds, cpu, peak, big_runs = peak_memory(
                        big, what=what, src=src, spans_held=options.spans_held
                    )
                    print(
                        f"  {big_size:7,.0f} MiB, {big_runs:,} runs, {name}, {what:9}: "
                        f"{seconds:6.1f} s wall, {cpu:6.1f} s CPU "
                        f"({big_size / cpu:5.1f} MiB/s of CPU), peak {peak:5,.0f} MiB"
                    )
            big.unlink()
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"load average: {load}; this process peak {peak:,.0f} MiB")


if __name__ == "__main__":
    main()
