"""OpenTelemetry GenAI traces (OTLP JSON) read into the same runs as agentfootprint snapshots.

:func:`sniff` tells a trace file by its content, :func:`read_trace_file` reads its spans
as small records, and :class:`TraceRuns` puts the spans of every file together into
runs (their ledger facts and, for a what-if, their message streams). The mapping from
the semantic conventions is written down in ``docs/opentelemetry.md``.
"""

from contextledger.read.otel._calls import (
    CALLED,
    DEFINITIONS_NOT_RECORDED,
    EXECUTED,
    NO_DEFINITIONS,
    NO_MODEL_CALL,
    NO_TOOLS_OFFERED,
)
from contextledger.read.otel._runs import (
    RUNNER_KIND,
    Assembled,
    TraceRun,
    TraceRuns,
    decode_spans,
    encode_spans,
)
from contextledger.read.otel._spill import OwnFolder, SpillTo, removed_with, spill_folder
from contextledger.read.otel.functions import (
    PROTOBUF,
    SNAKE_CASE,
    ZSTD,
    TraceFileRead,
    read_trace_file,
    sniff,
)

__all__ = [
    "CALLED",
    "DEFINITIONS_NOT_RECORDED",
    "EXECUTED",
    "NO_DEFINITIONS",
    "NO_MODEL_CALL",
    "NO_TOOLS_OFFERED",
    "PROTOBUF",
    "RUNNER_KIND",
    "SNAKE_CASE",
    "ZSTD",
    "Assembled",
    "OwnFolder",
    "SpillTo",
    "TraceFileRead",
    "TraceRun",
    "TraceRuns",
    "decode_spans",
    "encode_spans",
    "read_trace_file",
    "removed_with",
    "sniff",
    "spill_folder",
]
