"""Re-record the OpenTelemetry GenAI trace corpus: ``python record/otel/record.py data/otel``.

Writes ``OUT/traces/`` (the trace files, large ones gzipped) and ``OUT/truth.json`` (what
each model call offered and called), keeping the truth out of the folder a user points
``contextledger`` at. Runs one process per family (``record_family.py``). The ``record``
extra installs what the current families need (``pip install -e ".[record]"``); the
``openai-v2-*`` families need the ``record-legacy`` extra in a second environment, given
with ``--legacy-python``. Families whose instrumentation is not installed are skipped, and
say so.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from importlib.util import find_spec
from pathlib import Path

from families import (
    FAMILIES,
    INSTRUMENTORS,
)  # this folder is on sys.path: the script is run by its path

HERE = Path(__file__).resolve().parent
GZIP_ABOVE_BYTES = 100_000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path, help="folder for traces/ and truth.json")
    parser.add_argument(
        "--families",
        nargs="*",
        default=sorted(name for name, family in FAMILIES.items() if family.default),
        choices=sorted(FAMILIES),
        help="the families to record (default: all but the test-only ones)",
    )
    parser.add_argument(
        "--legacy-python",
        help="a python with the record-legacy extra, for the openai-v2-* families",
    )
    args = parser.parse_args()
    out: Path = args.out
    traces = out / "traces"
    traces.mkdir(parents=True, exist_ok=True)
    fragments = Path(tempfile.mkdtemp(prefix="otel-truth-"))
    recorded = []
    for name in args.families:
        family = FAMILIES[name]
        python = args.legacy_python if family.legacy else sys.executable
        if python is None or (
            python == sys.executable
            and not all(_installed(INSTRUMENTORS[name][0]) for name in family.instrumentations)
        ):
            why = "--legacy-python not given" if family.legacy else "not installed"
            print(f"skipped {name}: {why}")
            continue
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("OTEL_", "OPENINFERENCE_", "TRACELOOP_"))
        }
        subprocess.run(
            [python, str(HERE / "record_family.py"), name, str(traces), str(fragments / name)],
            check=True,
            env=env,
        )
        recorded.append(name)
        print(f"recorded {name}")
    _gzip_large(traces)
    _merge_truth(out, traces, sorted(fragments.iterdir()))
    shutil.rmtree(fragments)
    return 0


def _installed(module: str) -> bool:
    try:
        return find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def _gzip_large(out: Path) -> None:
    """Gzip trace files above GZIP_ABOVE_BYTES, with no name or time in the header."""
    for path in sorted(out.glob("*.jsonl")):
        if path.stat().st_size <= GZIP_ABOVE_BYTES:
            continue
        target = path.with_name(path.name + ".gz")
        with (
            target.open("wb") as raw,
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as zipped,
        ):
            zipped.write(path.read_bytes())
        path.unlink()


def _merge_truth(out: Path, traces: Path, recorded: list[Path]) -> None:
    """Fold the families just recorded into ``truth.json``, beside those recorded before."""
    names = {path.name for path in traces.glob("*.jsonl*")}
    merged = out / "truth.json"
    families = {
        family["family"]: family
        for family in (json.loads(merged.read_text())["families"] if merged.exists() else [])
    }
    for path in recorded:
        family = json.loads(path.read_text())
        family["files"] = [name if name in names else name + ".gz" for name in family["files"]]
        families[family["family"]] = family
    truth = {
        "about": "What the recording agent sent and received, per run and model call: README.md",
        "traces_folder": "traces",  # the families' "files" are in it
        "families": [families[name] for name in sorted(families)],
    }
    (out / "truth.json").write_text(_dump(truth))


def _dump(value: object) -> str:
    """Indented JSON with each list of strings or numbers on one line, to read at a glance."""
    text = json.dumps(value, indent=1)
    flat = re.compile(r"\[\n\s*((?:(?:\"[^\"\n]*\"|-?\d+),\n\s*)*(?:\"[^\"\n]*\"|-?\d+))\n\s*\]")
    return flat.sub(lambda m: "[" + re.sub(r",\n\s*", ", ", m.group(1)) + "]", text) + "\n"


if __name__ == "__main__":
    sys.exit(main())
