"""The ``contextledger`` command line.

Exit status: 0 when every input was read; 1 when some input could not be read
(each is named on stderr, everything else is still read and counted); 2 for a
command-line mistake, an unreadable option file (outcomes, sidecar, ledger) or an
output file that could not be written (it is then left as it was, never half-written).
A reader that closes the pipe early (``| head``) ends the command quietly.

One module per family of commands: ``ledger`` (ledger, outcomes, sql, gates),
``window`` (whatif, report), ``archive`` (ingest, synth, check); what they share
(options, reading inputs, warnings, writing output) is in ``common``.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from contextledger.cli import archive, ledger, window


class _Commands(click.Group):
    """The commands, with the refusals shared by all: an archive part found changed in
    place only once part of the archive was read (exit 1, each file named), and a
    Parquet file the engines cannot decode that no checksum caught (an archive written
    before parts had checksums: exit 1, one line, ``check`` to name the file)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except Exception as error:
            from contextledger.cli.common import EXIT_UNREADABLE_INPUT, _warn

            store = sys.modules.get("contextledger.archive.store")  # not imported by --help
            if store is not None and isinstance(error, store.ArchiveDamaged) and not error.written:
                _warn(error.lines)
            elif _undecodable_parquet(error):
                first = " ".join(str(error).split())[:300]
                _warn(
                    f"a Parquet file could not be decoded, so nothing was answered ({first}); "
                    "`contextledger check ARCHIVE` names the damaged file"
                )
            else:
                raise
            sys.exit(EXIT_UNREADABLE_INPUT)


def _undecodable_parquet(error: BaseException) -> bool:
    """An engine's (Polars, PyArrow, DuckDB) error about a Parquet file's bytes."""
    engine = type(error).__module__.partition(".")[0]
    return engine in ("polars", "pyarrow", "duckdb") and "parquet" in str(error).lower()


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="contextledger")
def main() -> None:
    """Which context pieces earned their tokens: analytics over recorded agentfootprint runs."""


for command in (
    ledger.ledger,
    ledger.outcomes,
    ledger.sql,
    ledger.gates,
    window.whatif_command,
    window.report_command,
    window.compare_command,
    archive.ingest_command,
    archive.synth_command,
    archive.check_command,
):
    main.add_command(command)
