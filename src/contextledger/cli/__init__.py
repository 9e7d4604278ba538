"""The ``contextledger`` command line.

Exit statuses are said once, in ``common.EXIT_STATUSES`` (``contextledger --help``
prints them): 0 every input read; 1 some input unreadable (each named on stderr, the
rest still read and counted; nothing read: no output at all); 2 a command-line mistake
(one line, whatever the option), an unreadable option file or an output that could not
be written (left as it was, never half-written); 130 interrupted by Ctrl-C.
A reader that closes the pipe early (``| head``) ends the command quietly.

One module per family of commands: ``ledger`` (ledger, outcomes, sql, gates),
``window`` (whatif, report), ``archive`` (ingest, synth, check); what they share
(options, reading inputs, warnings, writing output) is in ``common``.
"""

from __future__ import annotations

import sys
from typing import Any, NoReturn

import click

from contextledger.cli import archive, ledger, window


class _Commands(click.Group):
    """The commands, with the refusals shared by all: a bad option value or a missing
    argument (one line naming it, exit 2, as every other refusal: not click's usage
    block), Ctrl-C (exit 130), an archive part found changed in place only once part of
    the archive was read (exit 1, each file named), and a Parquet file the engines cannot
    decode that no checksum caught (an archive written before parts had checksums: exit
    1, one line, ``check`` to name the file)."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as error:  # the group's own options (``--bogus``)
            _refuse_usage(error)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as error:  # a command's arguments and options
            _refuse_usage(error)
        except KeyboardInterrupt:
            from contextledger.cli.common import EXIT_INTERRUPTED

            click.echo(err=True)  # off the ^C the terminal printed
            sys.exit(EXIT_INTERRUPTED)
        except Exception as error:
            from contextledger.cli.common import EXIT_UNREADABLE_INPUT, _warn

            damage = sys.modules.get("contextledger.archive.damage")  # not imported by --help
            if (
                damage is not None
                and isinstance(error, damage.ArchiveDamaged)
                and not error.written
            ):
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


def _refuse_usage(error: click.UsageError) -> NoReturn:
    """A command-line mistake as one line (``contextledger: gates: Invalid value for
    '--min-offers': ...``) and exit 2; click's usage block and hint were three more.
    With no arguments at all a command still prints its help."""
    from contextledger.cli.common import _fail

    if isinstance(error, click.exceptions.NoArgsIsHelpError):
        raise error
    context = error.ctx  # the root's own name is the program's, however it was started
    name = context.info_name if context is not None and context.parent is not None else ""
    command = f"contextledger {name}".strip()
    said = " ".join(error.format_message().split()).rstrip(".")
    _fail(f"{name + ': ' if name else ''}{said} (see {command} --help)")
    raise AssertionError  # unreachable: _fail exits


def _undecodable_parquet(error: BaseException) -> bool:
    """An engine's (Polars, PyArrow, DuckDB) error about a Parquet file's bytes."""
    engine = type(error).__module__.partition(".")[0]
    return engine in ("polars", "pyarrow", "duckdb") and "parquet" in str(error).lower()


def _exit_statuses() -> str:
    from contextledger.cli.common import EXIT_STATUSES

    lines = "\n".join(f"  {code:<4} {meaning}" for code, meaning in EXIT_STATUSES.items())
    return f"\b\nExit status:\n{lines}"


@click.group(
    cls=_Commands,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog=_exit_statuses(),
)
@click.version_option(package_name="contextledger")
def main() -> None:
    """Which context pieces earned their tokens: analytics over recorded agent runs.

    Reads agentfootprint snapshots and OpenTelemetry GenAI traces (OTLP JSON Lines, as
    the Collector's file exporter writes them, plain or gzip), told apart by content.

    Tables fit the terminal (its width, or COLUMNS); piped or written with -o they keep
    every column. --format csv, jsonl and parquet hold exact values in snake_case; json
    is LedgerJSON (the reference's camelCase) for ledger, an object for outcomes and gates,
    and JSON Lines for row results.
    """


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
