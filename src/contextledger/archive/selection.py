"""Which part of an archive a command reads: a path's query (``DIR?since=..&label=..``).

:func:`parse_archive_path` tells an archive path (a local folder or a URI holding
``archive.json``) from any other input and parses its filters into a :class:`Selection`:
an ingest date range that prunes whole commits, run ids, an outcome label.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from contextledger.archive.location import Location, locate, uri_scheme
from contextledger.archive.partitions import ingest_date_text
from contextledger.archive.store import Archive, ArchiveError, Commit


@dataclass(frozen=True)
class Selection:
    """Which runs of an archive to read: every filter given must hold.

    ``since``/``until`` are ingest dates (inclusive, ``YYYY-MM-DD``; a full ISO
    timestamp is taken as its UTC date, anything else raises ``ValueError``);
    ``run_ids`` keeps the runs listed; ``labels`` keeps runs carrying any of these
    outcome labels.
    """

    since: str | None = None
    until: str | None = None
    run_ids: tuple[str, ...] | None = None
    labels: tuple[str, ...] | None = None

    def __post_init__(self) -> None:  # stored dates are YYYY-MM-DD text: compare likewise
        for name in ("since", "until"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, ingest_date_text(value, name))

    def keeps(self, commit: Commit) -> bool:
        """Whether ``commit``'s files can hold selected runs (the date range)."""
        return self.keeps_date(commit.ingest_date)

    def keeps_date(self, ingest_date: str) -> bool:
        """Whether ``ingest_date`` is in the date range.

        >>> Selection(since="2026-11-02").keeps_date("2026-11-01")
        False
        """
        if self.since is not None and ingest_date < self.since:
            return False
        return self.until is None or ingest_date <= self.until


_FILTERS = ("since", "until", "label", "run_id")


def _filesystem_options(query: str) -> list[str]:
    """The parameters of ``query`` that are not filters, as given: on a remote
    filesystem's URI they are pyarrow's options (``region``, ``endpoint_override``...)."""
    parts = query.split("&") if query else []
    return [part for part in parts if part and unquote(part.partition("=")[0]) not in _FILTERS]


def _query_fields(
    text: str, query: str, options: Sequence[str] = ()
) -> dict[str, list[tuple[str, str]]]:
    """Each filter's values in order, as ``(decoded, as given)``: ``%XX`` escapes are
    decoded, ``+`` stays a plus (a timezone offset, a run id); not form encoding.
    ``options`` (:func:`_filesystem_options`) are passed over."""
    fields: dict[str, list[tuple[str, str]]] = {}
    for part in query.split("&") if query else []:
        if not part or part in options:
            continue
        name, _, given = part.partition("=")
        fields.setdefault(unquote(name), []).append((unquote(given), given))
    unknown = set(fields) - set(_FILTERS)
    if unknown:
        raise ArchiveError(
            f"{text}: unknown archive filter {', '.join(sorted(unknown))} "
            "(use since, until, label, run_id)"
        )
    return fields


def _local_archive_split(text: str) -> tuple[str, str, str] | None:
    """``(folder, "?", query)`` for a local path whose folder name itself holds ``?``
    (``arch?q`` or ``arch?q?label=x``), splitting after the longest prefix that is an
    archive; None when the first ``?`` starts the query (the usual case)."""
    if "?" not in text or uri_scheme(text) is not None:
        return None
    cuts = [at for at, char in enumerate(text) if char == "?"]
    for at in [len(text), *reversed(cuts[1:])]:
        try:
            if Path(text[:at], "archive.json").is_file():
                return text[:at], "?", text[at + 1 :]
        except OSError:  # a long query is no folder's name (ENAMETOOLONG)
            continue
    return None


def parse_archive_path(text: str) -> tuple[Location, Selection] | None:
    """``DIR`` or ``DIR?since=D&until=D&label=L&run_id=A,B`` naming an archive; else None.

    ``DIR`` may be a URI (:func:`~contextledger.archive.location.locate`): ``file:///``
    reads as the local path; on another filesystem, query parameters other than the
    filters are pyarrow's options for it (``s3://b/dir?region=eu-west-1&label=good``),
    and a URI naming no archive raises :class:`ArchiveError`, as one pyarrow cannot open
    or reach does.

    ``run_id`` and ``label`` may repeat or list values with commas (any of them is
    kept); ``run_id=@FILE`` reads run ids from a file, one per line. ``since`` and
    ``until`` may be given once each.

    A local archive whose folder name holds ``?`` is read as named: the query starts at
    the ``?`` after the longest prefix naming an archive.

    >>> parse_archive_path("data/sample") is None
    True
    """
    base, _, query = _local_archive_split(text) or text.partition("?")
    scheme = uri_scheme(base)
    options = _filesystem_options(query) if scheme not in (None, "file") else []
    location = locate(base + ("?" + "&".join(options) if options else ""))
    if not Archive.is_archive(location):
        if scheme is None:
            return None
        raise ArchiveError(f"{base}: no contextledger archive there (no archive.json)")
    fields = _query_fields(text, query, options)
    dates: dict[str, str | None] = {}
    for name in ("since", "until"):
        values = fields.get(name, [])
        if len(values) > 1:
            given = ", ".join(repr(raw) for _, raw in values)
            raise ArchiveError(f"{text}: {name} given {len(values)} times ({given}): give it once")
        try:
            dates[name] = (
                ingest_date_text(values[0][0], name, shown=values[0][1]) if values else None
            )
        except ValueError as error:
            raise ArchiveError(f"{text}: {error}") from None

    def listed(name: str, files: bool) -> tuple[str, ...] | None:
        if name not in fields:
            return None
        items: list[str] = []
        for value, _ in fields[name]:
            if files and value.startswith("@"):
                try:
                    # utf-8-sig: a BOM (Notepad writes one) is not part of the first id
                    lines = Path(value[1:]).read_text(encoding="utf-8-sig").splitlines()
                except FileNotFoundError:
                    raise ArchiveError(f"{value[1:]}: no such file (run_id=@FILE)") from None
                except OSError as error:
                    reason = (error.strerror or str(error)).lower()
                    raise ArchiveError(f"{value[1:]}: cannot be read ({reason})") from None
                items.extend(line.strip() for line in lines if line.strip())
            else:
                items.extend(item for item in value.split(",") if item)
        return tuple(items)

    selection = Selection(
        dates["since"], dates["until"], listed("run_id", True), listed("label", False)
    )
    return location, selection
