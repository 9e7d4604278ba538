"""The ledger command end to end: formats, outcomes, merge, and bad input that loses nothing."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from contextledger.cli import main
from contextledger.cli.common import EXIT_UNREADABLE_INPUT, EXIT_USAGE

from .conftest import SAMPLE

SAMPLE_RUNS = len(list(SAMPLE.glob("*.json.gz")))


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture
def batch(tmp_path: Path) -> Path:
    """The sample plus four broken files, in one folder."""
    folder = tmp_path / "batch"
    shutil.copytree(SAMPLE, folder)
    good = (SAMPLE / "s0003-loop.json.gz").read_bytes()
    (folder / "truncated.json.gz").write_bytes(good[: len(good) // 2])
    (folder / "invalid.json").write_text('{"commitLog": [', encoding="utf-8")
    (folder / "not-a-snapshot.json").write_text("[1, 2, 3]", encoding="utf-8")
    wrong = {"commitLog": [{"trace": "not an array", "overwrite": {}}]}
    (folder / "wrong-types.json").write_text(json.dumps(wrong), encoding="utf-8")
    return folder


def test_table_lists_rows_and_says_how_many_runs_were_metered_and_refused():
    result = run("ledger", str(SAMPLE), "--mode", "reference")
    assert result.exit_code == 0
    assert "probe_fact" in result.output
    assert f"{SAMPLE_RUNS - 2} run(s) metered, 2 refused" in result.output
    assert "no call marker" in result.output


def test_json_is_ledger_json_v1_with_the_reference_field_names():
    result = run("ledger", str(SAMPLE), "--mode", "reference", "--format", "json")
    document = json.loads(result.stdout)
    assert document["version"] == 1
    assert document["runsRecorded"] == SAMPLE_RUNS - 2
    assert set(document["rows"][0]) == {
        "id",
        "kind",
        "offered",
        "approxTokensSpent",
        "used",
        "usedVia",
        "runsSeen",
        "outcomes",
        "earnRate",
    }


def test_outcome_labels_are_credited_to_every_piece_the_run_offered(tmp_path):
    labels = tmp_path / "labels.csv"
    labels.write_text(
        "run_id,label\ns0001-fact-bench,good\ns0001-fact-bench,reviewed\n", encoding="utf-8"
    )
    result = run(
        "ledger",
        str(SAMPLE / "s0001-fact-bench.json.gz"),
        "--mode",
        "reference",
        "--format",
        "json",
        "--outcomes",
        str(labels),
    )
    rows = json.loads(result.stdout)["rows"]
    assert {row["id"]: row["outcomes"] for row in rows} == {
        "probe_fact": {"good": 1, "reviewed": 1},
        "probe_noise": {"good": 1, "reviewed": 1},
    }


def test_outcomes_also_read_from_json_lines(tmp_path):
    labels = tmp_path / "labels.jsonl"
    labels.write_text('{"run_id": "s0001-fact-bench", "label": "bad"}\n', encoding="utf-8")
    result = run(
        "ledger",
        str(SAMPLE / "s0001-fact-bench.json.gz"),
        "--format",
        "json",
        "--outcomes",
        str(labels),
    )
    assert json.loads(result.stdout)["rows"][0]["outcomes"] == {"bad": 1}


def test_a_malformed_outcomes_file_is_a_usage_error_naming_the_line(tmp_path):
    labels = tmp_path / "labels.csv"
    labels.write_text("run_id,label\ns0001-fact-bench,\n", encoding="utf-8")
    result = run("ledger", str(SAMPLE), "--outcomes", str(labels))
    assert result.exit_code == EXIT_USAGE
    assert f"{labels}:2" in result.stderr


def labels_file(tmp_path: Path, labels: list[str], tail: str = "") -> Path:
    """A CSV giving the sample's runs ``labels`` in turn, then ``tail`` as written."""
    runs = sorted(path.name.removesuffix(".json.gz") for path in SAMPLE.glob("*.json.gz"))
    rows = [f"{runs[i % len(runs)]},{label}" for i, label in enumerate(labels)]
    path = tmp_path / "labels.csv"
    path.write_text("\n".join(["run_id,label", *rows]) + "\n" + tail, encoding="utf-8")
    return path


@pytest.mark.parametrize("command", ["ledger", "outcomes"])
def test_a_labels_file_of_ids_or_free_text_is_refused_at_the_first_label_past_the_cap(
    tmp_path, command
):
    """1,000,000 distinct labels over the sample went past 8 GB; the file is refused at
    label 2,001 (line 2,002), before the rest is even parsed (the broken row after it)."""
    from contextledger.tables.sidecars import MAX_DISTINCT_LABELS

    assert MAX_DISTINCT_LABELS == 2_000
    ids = [f"ticket-{number}" for number in range(MAX_DISTINCT_LABELS + 1)]
    path = labels_file(tmp_path, ids, tail='s0003-loop,"never closed\n')
    result = run(command, str(SAMPLE), "--outcomes", str(path))
    assert result.exit_code == EXIT_USAGE
    assert result.stdout == ""
    assert result.stderr == (
        f"contextledger: {path}:2002: more than 2,000 distinct labels; labels are categories "
        "(good, bad, ...): is the label column run ids or free text?\n"
    )


def test_a_labels_file_at_the_cap_is_read_with_every_row(tmp_path):
    """2,000 distinct labels, each given twice: 4,000 rows, all read."""
    from contextledger.tables.sidecars import MAX_DISTINCT_LABELS, load_outcomes

    labels = [f"cohort-{number % MAX_DISTINCT_LABELS}" for number in range(2 * MAX_DISTINCT_LABELS)]
    table = load_outcomes(labels_file(tmp_path, labels))
    assert table.num_rows == 4_000
    assert len(set(table.column("label").to_pylist())) == 2_000


def test_bad_files_are_named_without_traceback_and_the_rest_still_counts(batch):
    result = run("ledger", str(batch), "--mode", "reference", "--format", "json")
    assert result.exit_code == EXIT_UNREADABLE_INPUT
    assert json.loads(result.stdout)["runsRecorded"] == SAMPLE_RUNS - 2
    assert "Traceback" not in result.stderr
    for name, reason in [
        ("truncated.json.gz", "gzip"),
        ("invalid.json", "invalid JSON"),
        ("not-a-snapshot.json", "not a snapshot"),
        ("wrong-types.json", "$.commitLog[0].trace"),
    ]:
        line = next(line for line in result.stderr.splitlines() if name in line)
        assert reason in line
    assert "4 input(s) unreadable" in result.stderr


def test_strict_stops_at_the_first_bad_file(batch):
    result = run("ledger", str(batch), "--strict")
    assert result.exit_code == EXIT_UNREADABLE_INPUT
    assert "stopped: --strict" in result.stderr
    assert result.stdout == ""


def test_a_missing_path_is_reported_not_fatal(tmp_path):
    result = run("ledger", str(SAMPLE), str(tmp_path / "nope.json"))
    assert result.exit_code == EXIT_UNREADABLE_INPUT
    assert "no such file" in result.stderr


def test_json_lines_input_reads_one_snapshot_per_line_with_line_numbered_run_ids(tmp_path):
    snapshot = json.loads(gzip.decompress((SAMPLE / "s0001-fact-bench.json.gz").read_bytes()))
    bare = json.dumps(snapshot["snapshot"])
    other = json.dumps({**snapshot["snapshot"], "runId": "another-execution"})  # another run
    (tmp_path / "runs.jsonl").write_text(f"{bare}\n{other}\n", encoding="utf-8")
    sidecar = tmp_path / "static.json"
    sidecar.write_text(json.dumps({"runs:1": ["extra_tool"]}), encoding="utf-8")
    result = run(
        "ledger",
        str(tmp_path / "runs.jsonl"),
        "--mode",
        "reference",
        "--format",
        "json",
        "--static-tools",
        str(sidecar),
    )
    document = json.loads(result.stdout)
    assert document["runsRecorded"] == 2
    extra = next(row for row in document["rows"] if row["id"] == "extra_tool")
    assert (extra["offered"], extra["runsSeen"]) == (21, 1)


def test_merge_adds_an_exported_ledger_as_import_json_does(tmp_path):
    exported = tmp_path / "yesterday.json"
    exported.write_text(run("ledger", str(SAMPLE), "--format", "json").stdout, encoding="utf-8")
    once = json.loads(run("ledger", str(SAMPLE), "--format", "json").stdout)
    twice = json.loads(
        run("ledger", str(SAMPLE), "--format", "json", "--merge", str(exported)).stdout
    )
    assert twice["runsRecorded"] == 2 * once["runsRecorded"]
    assert [row["offered"] for row in twice["rows"]] == [2 * r["offered"] for r in once["rows"]]


def test_an_unknown_ledger_json_version_is_refused_by_name(tmp_path):
    future = tmp_path / "future.json"
    future.write_text('{"version": 2, "rows": [], "runsRecorded": 0}', encoding="utf-8")
    result = run("ledger", str(SAMPLE), "--merge", str(future))
    assert result.exit_code == EXIT_USAGE
    assert "unsupported LedgerJSON version 2" in result.stderr


def sample_export_with(tmp_path: Path, field: str, number: str) -> Path:
    """The sample's exported ledger with one number replaced by ``number``, as written:
    ``field`` is ``runsRecorded`` or a field of the first row (``offered``, ...)."""
    text = run("ledger", str(SAMPLE), "--format", "json").stdout
    document = json.loads(text)
    placeholder = 987654321987
    if field == "runsRecorded":
        document["runsRecorded"] = placeholder
    elif field == "outcomes":
        document["rows"][0]["outcomes"] = {"good": placeholder}
    else:
        document["rows"][0][field] = placeholder
    path = tmp_path / "yesterday.json"
    path.write_text(json.dumps(document).replace(str(placeholder), number), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("field", "number", "reason"),
    [
        ("offered", str(2**70), f"offered is {2**70}, past the largest count"),
        ("offered", "1e400", "offered is 1E+400, not a finite number"),
        ("offered", "-1", "offered is -1, a count cannot be negative"),
        ("used", "1.5", "used is 1.5, not a whole number"),
        ("approxTokensSpent", '"12"', 'approxTokensSpent must be a whole number, got "12"'),
        ("runsSeen", "true", "runsSeen must be a whole number, got true"),
        ("outcomes", "-2", "outcomes['good'] is -2, a count cannot be negative"),
        ("runsRecorded", "-5", "runsRecorded is -5, a count cannot be negative"),
        ("runsRecorded", "2.5", "runsRecorded is 2.5, not a whole number"),
    ],
)
def test_a_merge_file_number_that_is_no_count_is_refused_naming_file_row_and_field(
    tmp_path, field, number, reason
):
    path = sample_export_with(tmp_path, field, number)
    result = run("ledger", str(SAMPLE), "--merge", str(path))
    assert result.exit_code == EXIT_USAGE
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    where = "" if field == "runsRecorded" else "row 0 (id 'probe_fact') is not a LedgerRow ("
    assert line.startswith(f"contextledger: {path}: {where}{reason}"), line


@pytest.mark.parametrize(
    ("document", "reason"),
    [
        ('{"version": 1, "rows": 5}', "rows must be an array of LedgerRows, got 5"),
        (
            '{"version": 1, "rows": [7]}',
            "row 0 is not a LedgerRow (a LedgerRow is an object, got 7)",
        ),
        ('{"version": 1, "rows": [], "runsRecorded": 1e400}', "runsRecorded is 1E+400, not a"),
        ('{"version": 1, "rows": [], "runsRecorded": NaN}', "not a LedgerJSON document (NaN is"),
        ("[1, 2]", "a LedgerJSON document is an object, got list"),
    ],
)
def test_a_merge_file_of_another_shape_is_refused_in_one_line(tmp_path, document, reason):
    path = tmp_path / "odd.json"
    path.write_text(document, encoding="utf-8")
    result = run("ledger", str(SAMPLE), "--merge", str(path))
    assert result.exit_code == EXIT_USAGE
    [line] = result.stderr.splitlines()
    assert line.startswith(f"contextledger: {path}: {reason}"), line


def test_merged_counts_past_int64_are_refused_not_wrapped(tmp_path):
    path = sample_export_with(tmp_path, "offered", str(2**63 - 1))
    result = run("ledger", str(SAMPLE), "--merge", str(path), "--format", "json")
    assert result.exit_code == EXIT_USAGE
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"contextledger: --merge {path}: tool 'probe_fact': offered adds up to {2**63 - 1 + 21}, "
        "past the largest count (2**63 - 1)"
    ]


def test_a_whole_number_written_with_a_point_is_the_same_count(tmp_path):
    """JSON has one number type: the reference reads ``21.0`` as ``21``."""
    path = sample_export_with(tmp_path, "offered", "21.0")
    merged = json.loads(run("ledger", str(SAMPLE), "--merge", str(path), "--format", "json").stdout)
    assert merged["rows"][0]["offered"] == 42


@pytest.mark.parametrize("suffix", [".json", ".jsonl"])
def test_a_static_tools_sidecar_may_start_with_a_bom(tmp_path, suffix):
    """Notepad's UTF-8 starts with U+FEFF, which is not JSON: the sidecar was refused."""
    from contextledger.tables.sidecars import load_static_tools

    sidecar = tmp_path / f"static{suffix}"
    names = {"s0001-fact-bench": ["extra_tool"], "s0003-loop": []}
    if suffix == ".json":
        text = json.dumps(names)
    else:
        text = "".join(
            json.dumps({"run_id": run_id, "static_tool_names": tools}) + "\n"
            for run_id, tools in names.items()
        )
    sidecar.write_text(text, encoding="utf-8-sig")
    assert load_static_tools(sidecar) == names


def test_a_merge_file_may_start_with_a_bom(tmp_path):
    exported = tmp_path / "yesterday.json"
    once = run("ledger", str(SAMPLE), "--format", "json").stdout
    exported.write_text(once, encoding="utf-8-sig")
    result = run("ledger", str(SAMPLE), "--merge", str(exported), "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["runsRecorded"] == 2 * json.loads(once)["runsRecorded"]


@pytest.mark.parametrize("output_format", ["csv", "parquet"])
def test_csv_and_parquet_hold_the_same_rows_as_the_table(tmp_path, output_format):
    import polars as pl

    target = tmp_path / f"ledger.{output_format}"
    result = run("ledger", str(SAMPLE), "--format", output_format, "-o", str(target))
    assert result.exit_code == 0
    frame = pl.read_csv(target) if output_format == "csv" else pl.read_parquet(target)
    as_json = json.loads(run("ledger", str(SAMPLE), "--format", "json").stdout)
    assert frame.height == len(as_json["rows"])
    assert frame["earn_rate"].is_sorted()


def test_outcomes_prints_the_association_table_and_says_it_is_not_cause():
    result = run("outcomes", str(SAMPLE), "--outcomes", str(SAMPLE.parent / "sample-outcomes.csv"))
    assert result.exit_code == 0
    assert "Association, not cause" in result.output
    assert "share_with_label" in result.output


def test_the_table_shows_an_interval_and_whether_the_row_is_judged_yet():
    result = run("ledger", str(SAMPLE / "s0001-fact-bench.json.gz"), "--min-offers", "22")
    # probe_fact: 6 uses in 21 offers; the rate at its interval's precision
    assert "0.286 ┆ [0.138, 0.500]" in result.output
    assert "judged" in result.output and "false" in result.output


def test_the_public_names_all_resolve_from_the_package():
    import contextledger

    assert sorted(contextledger.__all__) == sorted(contextledger._EXPORTS)
    for name in contextledger.__all__:
        assert getattr(contextledger, name) is not None
    with pytest.raises(AttributeError):
        _ = contextledger.no_such_name


def test_dir_lists_the_public_names_before_they_load_so_tab_completion_finds_them():
    code = (
        "import contextledger, sys; names = dir(contextledger); "
        "print(sorted(set(contextledger.__all__) - set(names)), 'read_runs' in vars(contextledger),"
        " [n for n in names if not n.startswith('_') and n not in contextledger.__all__])"
    )
    import subprocess
    import sys

    said = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert said.stdout.split("\n")[0] == "[] False []"  # all listed, none loaded, no helpers


def test_read_runs_warns_naming_a_path_it_could_not_read(tmp_path):
    import contextledger

    with pytest.warns(UserWarning) as caught:
        tables = contextledger.read_runs(tmp_path / "sampel")
    assert tables.runs.num_rows == 0 and tables.problems.num_rows == 1
    assert [str(w.message) for w in caught] == [
        f"skipped {tmp_path / 'sampel'}: no such file",
        f"no run read from {tmp_path / 'sampel'}",
    ]
    assert caught[0].filename == __file__  # said where the caller made the mistake


def test_read_runs_of_good_inputs_warns_nothing():
    import warnings

    import contextledger

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert contextledger.read_runs(SAMPLE).runs.num_rows == 14


@pytest.mark.parametrize(
    "args",
    [
        ["ledger", str(SAMPLE), "--min-offers", "0"],
        ["gates", str(SAMPLE), "--min-offers", "0"],
        ["gates", str(SAMPLE), "--floor", "-1"],
        ["report", str(SAMPLE), "--charts", "gif"],
    ],
)
def test_option_ranges_are_the_same_across_commands(args):
    """--min-offers is at least 1 in ledger and gates alike; a negative floor is refused."""
    result = CliRunner().invoke(main, args)
    assert result.exit_code == EXIT_USAGE and "Invalid value" in result.output


@pytest.mark.parametrize("charts", ["png,svg", "svg,png", "SVG", "none"])
def test_chart_formats_are_taken_in_any_order(tmp_path, charts):
    args = ["report", "-o", str(tmp_path), "--charts", charts, "--policy", "none"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    written = {path.suffix for path in (tmp_path / "charts").glob("*")}
    assert written == (
        {".svg", ".png"} if "," in charts else set() if charts == "none" else {".svg"}
    )


def test_outcomes_reads_an_archives_stored_labels_without_a_file(tmp_path):
    from contextledger.jobs.ingest import ingest

    root = tmp_path / "archive"
    ingest([SAMPLE], root, outcomes=SAMPLE.parent / "sample-outcomes.csv", workers=1)
    stored = CliRunner().invoke(main, ["outcomes", str(root), "--format", "csv"])
    given = CliRunner().invoke(
        main,
        [
            "outcomes",
            str(SAMPLE),
            "--outcomes",
            str(SAMPLE.parent / "sample-outcomes.csv"),
            "--format",
            "csv",
        ],
    )
    assert stored.exit_code == given.exit_code == 0, stored.output
    assert stored.stdout == given.stdout and stored.stdout.count("\n") > 5
    none = CliRunner().invoke(main, ["outcomes", str(SAMPLE)])
    assert none.exit_code == EXIT_USAGE and "no outcome labels" in none.stderr


@pytest.mark.parametrize(
    "command",
    [None, "ledger", "outcomes", "sql", "gates", "whatif", "report", "compare", "ingest", "check"],
)
def test_help_says_opentelemetry_traces_are_read_too(command):
    """A user with traces learns from ``--help`` that their files are read."""
    args = [command, "--help"] if command else ["--help"]
    result = CliRunner().invoke(main, args, terminal_width=100)
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert "OpenTelemetry" in text and "OTLP JSON Lines" in text
