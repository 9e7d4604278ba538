"""A seeded mutation fuzzer: broken snapshots never crash a reader, and never cost a good run.

Real snapshots are mutated at random (a fixed seed, so a failure reproduces): keys
deleted, values of the wrong type, nulls, arrays for objects and objects for arrays,
deep nesting, huge strings, truncated bytes. Each mutation is written beside an
untouched snapshot and read by the ledger (both accountings), the what-if replay
(two policies) and ingest: no exception may escape, the good run is always counted,
and every mutation is either read as a run or named as a problem with a reason.
"""

from __future__ import annotations

import gzip
import json
import random
import shutil
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from contextledger.archive import archive_tables
from contextledger.jobs.ingest import ingest
from contextledger.jobs.whatif import read_inputs
from contextledger.read.snapshot import ReadError, decode_run, iter_documents
from contextledger.tables.build import ACCOUNTING_MODES, read_accountings
from contextledger.window.whatif import parse_policies, whatif_table

from .conftest import SAMPLE, as_new_run, corpus_dir

SEED = 20240611
MUTATIONS = 280
BATCH = 40  # mutations per folder (and per archive)
#: Small real runs of three shapes: a plain LLMCall, a multi-turn conversation, and a
#: loop recorded with a window (replayed exactly under a windowed policy); each with the
#: sample's run of that shape standing in where the corpus is absent.
BASES = {
    "s0246-llmcall": "s0246-llmcall",
    "s0202-conv-t1": "s0202-conv-t1",
    "s0057-loop": "s0003-loop",
}
GOOD = "s0048-loop"
POLICIES = parse_policies(["sliding:keep=3", "token_budget:threshold=500,keep=2"])
DEEP = "\x00deep\x00"


def source(name: str) -> Path:
    """A corpus run (the sample's stand-in where the corpus is absent)."""
    found = corpus_dir() / "runs" / f"{name}.json.gz"
    return found if found.is_file() else SAMPLE / f"{BASES.get(name, name)}.json.gz"


def _walk_to(rng: random.Random, document: Any) -> tuple[Any, Any]:
    """A random (container, key) inside ``document``, mostly in the commit log."""
    snapshot = document.get("snapshot") if isinstance(document, dict) else None
    roll = rng.random()
    if isinstance(snapshot, dict) and roll < 0.75 and isinstance(snapshot.get("commitLog"), list):
        log = snapshot["commitLog"]
        written = [b for b in log if isinstance(b, dict) and isinstance(b.get("overwrite"), dict)]
        written = [b for b in written if b["overwrite"]]
        if written and rng.random() < 0.8:  # the values the fold reads, mostly
            values = rng.choice(written)["overwrite"]
            parent, key = values, rng.choice(list(values))
        elif log:
            parent, key = log, rng.randrange(len(log))
        else:
            return snapshot, "commitLog"
    elif isinstance(snapshot, dict) and roll < 0.9 and snapshot:
        parent, key = snapshot, rng.choice(list(snapshot))
    else:
        parent, key = document, rng.choice(list(document)) if document else None
    while rng.random() < 0.7:
        value = parent[key]
        if isinstance(value, dict) and value:
            parent, key = value, rng.choice(list(value))
        elif isinstance(value, list) and value:
            parent, key = value, rng.randrange(len(value))
        else:
            break
    return parent, key


def _wrong_value(rng: random.Random, number: int) -> Any:
    return rng.choice(
        [
            0,
            -1,
            1.5,
            True,
            False,
            2**70,
            f"fuzz-{number}",
            [],
            {},
            [1, f"fuzz-{number}"],
            [None],
            [{}],
            {"k": number},
            None,
        ]
    )


def _retype_everywhere(rng: random.Random, document: Any, number: int) -> bool:
    """Give one state key the same wrong value in every bundle that writes it."""
    snapshot = document.get("snapshot") if isinstance(document, dict) else None
    log = snapshot.get("commitLog") if isinstance(snapshot, dict) else None
    bundles = log if isinstance(log, list) else []
    writes = [b.get("overwrite") for b in bundles if isinstance(b, dict)]
    writes = [values for values in writes if isinstance(values, dict)]
    keys = sorted({key for values in writes for key in values})
    if not keys:
        return False
    key, value = rng.choice(keys), _wrong_value(rng, number)
    for values in writes:
        if key in values:
            values[key] = value
    return True


def mutate(rng: random.Random, document: Any, number: int) -> tuple[str, Any]:
    """One structural mutation of ``document`` (in place where it can be): (what, result)."""
    if rng.random() < 0.25 and _retype_everywhere(rng, document, number):
        return "wrong type everywhere", document
    parent, key = _walk_to(rng, document)
    if key is None:
        return "emptied", _wrong_value(rng, number)
    value = parent[key]
    kind = rng.choice(
        ["delete", "null", "wrong type", "array for object", "object for array", "deep", "huge"]
    )
    if kind == "delete":
        del parent[key]
    elif kind == "null":
        parent[key] = None
    elif kind == "wrong type":
        parent[key] = _wrong_value(rng, number)
    elif kind == "array for object":
        parent[key] = list(value.values()) if isinstance(value, dict) else [value]
    elif kind == "object for array":
        items = value if isinstance(value, list) else [value]
        parent[key] = {str(i): item for i, item in enumerate(items)}
    elif kind == "deep":
        parent[key] = DEEP
    else:
        parent[key] = "x" * rng.choice([1 << 16, 1 << 20, 3 << 20])
    return kind, document


@cache
def mutations(count: int) -> tuple[tuple[str, str, bytes], ...]:
    """``(file name, what was done, bytes)`` for ``count`` mutations of the base runs
    (made once, some 4 s of CPU: each batch of the test takes its slice)."""
    rng = random.Random(SEED)
    bases = {name: gzip.decompress(source(name).read_bytes()) for name in BASES}
    made = []
    for number in range(count):
        base = rng.choice(list(BASES))
        document = json.loads(bases[base])
        as_new_run(document, f"m{number:04d}")  # every mutation its own run
        done = []
        for _ in range(rng.choice([1, 1, 2, 3])):
            kind, document = mutate(rng, document, number)
            done.append(kind)
        levels = rng.choice([50, 1000])
        data = json.dumps(document).replace(json.dumps(DEEP), "[" * levels + "]" * levels).encode()
        suffix = rng.choice([".json", ".json.gz", ".jsonl"])
        if rng.random() < 0.1:
            data = data[: rng.randrange(len(data))]
            done.append("truncated")
        if suffix == ".json.gz":
            data = gzip.compress(data, compresslevel=1)
            if rng.random() < 0.05:
                data = data[: rng.randrange(len(data))]
                done.append("truncated gzip")
        made.append((f"m{number:04d}-{base}{suffix}", "+".join(done), data))
    return tuple(made)


def run_id_of(path: Path) -> str | None:
    """The id the readers give the run in ``path``, if its document decodes."""
    try:
        return decode_run(next(iter_documents(path))).run_id
    except (ReadError, StopIteration):
        return None


def by_path(table: Any, path: str, value: str) -> dict[str, str]:
    """``path -> value`` over the rows of an Arrow table."""
    return dict(zip(table[path].to_pylist(), table[value].to_pylist(), strict=True))


def check_named(what: dict[str, str], read: dict[str, str], problems: dict[str, str], reader: str):
    """Every mutation (by file) read as a run or named with a reason, never both silent."""
    for name, done in what.items():
        assert name in read or problems.get(name), f"{reader} lost {name} ({done})"


@pytest.mark.parametrize("batch", range(MUTATIONS // BATCH))
def test_mutated_snapshots_never_crash_a_reader_or_cost_the_good_run(batch: int, tmp_path: Path):
    folder = tmp_path / "runs"
    folder.mkdir()
    shutil.copy(source(GOOD), folder / f"{GOOD}.json.gz")
    what = {}
    for name, done, data in mutations(MUTATIONS)[batch * BATCH : (batch + 1) * BATCH]:
        (folder / name).write_bytes(data)
        what[str(folder / name)] = done
    ids = {path: run_id for path in what if (run_id := run_id_of(Path(path)))}

    # both accountings from one read of each document, as read_runs under each alone
    # gives them (test_report's one-pass test): each accounting still folds every mutation
    for mode, tables in read_accountings(folder, ACCOUNTING_MODES, workers=1).items():
        runs = by_path(tables.runs, "source_path", "run_id")
        problems = by_path(tables.problems, "path", "reason")
        assert runs.get(str(folder / f"{GOOD}.json.gz")) == GOOD, mode
        check_named(what, runs, problems, f"ledger ({mode})")

    inputs = read_inputs(folder)
    streamed = {stream.run_id for stream in inputs.streams}
    assert GOOD in streamed
    replayed = {path: run_id for path, run_id in ids.items() if run_id in streamed}
    problems = {problem.path: problem.reason for problem in inputs.problems}
    check_named(what, replayed, problems, "whatif")
    per_run = whatif_table(inputs.streams, POLICIES)
    assert set(per_run["run_id"]) == streamed

    archive = tmp_path / "archive"
    report = ingest([folder], archive, workers=1)
    stored = archive_tables([str(archive)], "corrected")
    assert stored is not None
    archived = by_path(stored.runs, "source_path", "run_id")
    assert archived.get(str(folder / f"{GOOD}.json.gz")) == GOOD
    quarantined = {problem["path"]: problem["reason"] for problem in report.problems}
    check_named(what, archived, quarantined, "ingest")


def test_a_boolean_iteration_is_no_iteration_and_the_run_still_replays(tmp_path: Path):
    """Found by the fuzzer: ``iteration: true`` passed for an int, and the exact replay's
    rows (32-bit iteration) refused the bool, losing every run of the what-if."""
    document = json.loads(gzip.decompress((SAMPLE / "s0003-loop.json.gz").read_bytes()))
    for bundle in document["snapshot"]["commitLog"]:
        if "iteration" in bundle["overwrite"]:
            bundle["overwrite"]["iteration"] = True
    path = tmp_path / "boolean-iteration.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    inputs = read_inputs([path, SAMPLE / f"{GOOD}.json.gz"])
    assert inputs.problems == []
    stream = inputs.streams[0]
    assert [call.iteration for call in stream.calls] == [c.ordinal for c in stream.calls]
    per_run = whatif_table(inputs.streams, POLICIES)
    assert per_run["run_id"].to_list() == ["s0003-loop"] * 2 + [GOOD] * 2
