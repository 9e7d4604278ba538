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
    """The commands, with one refusal shared by all: an archive part found changed in
    place only once part of the archive was read (exit 1, each file named)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except Exception as error:
            store = sys.modules.get("contextledger.archive.store")  # not imported by --help
            if store is None or not isinstance(error, store.ArchiveDamaged) or error.written:
                raise
            from contextledger.cli.common import EXIT_UNREADABLE_INPUT, _warn

            _warn(error.lines)
            sys.exit(EXIT_UNREADABLE_INPUT)


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
