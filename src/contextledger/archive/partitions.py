"""Where a run's files go: the ingest date a batch is recorded under, and partition values.

An archive filters by ingest date as ``YYYY-MM-DD`` text, so every date given (an
ingest's ``--ingest-date``, a path's ``since``/``until``) is checked and normalized here
first; a run's partition directory (``KEY=VALUE``) is escaped for any file system.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from urllib.parse import quote

#: ``YYYY-MM-DD``, or a full ISO timestamp (``YYYY-MM-DDTHH:MM[:SS[.f]][Z|+HH:MM]``).
_ISO_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_ISO_TIMESTAMP = re.compile(
    _ISO_DATE.pattern
    + r"[T ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,6})?)?(Z|[+-][0-9]{2}:?[0-9]{2})?"
)


def ingest_date_or_today(value: str | None) -> str:
    """The ingest date a batch is recorded under: ``value`` checked by
    :func:`ingest_date_text`, or today's UTC date when none is given."""
    return ingest_date_text(value or dt.datetime.now(dt.UTC).date().isoformat())


def ingest_date_text(value: str, name: str = "date", shown: str | None = None) -> str:
    """``value`` as the ``YYYY-MM-DD`` ingest date an archive stores and filters by.

    A full ISO timestamp is taken as its UTC date (one without an offset as UTC
    already). Anything else, the compact ``20261101`` included (stored dates are
    compared as text, so it would select nothing), raises ``ValueError`` naming
    ``name`` and the value (``shown``, when the user wrote it otherwise: escaped in a URL).

    >>> ingest_date_text("2026-11-01"), ingest_date_text("2026-11-01T23:30:00-02:00")
    ('2026-11-01', '2026-11-02')
    """
    text = value.strip()
    try:
        if _ISO_DATE.fullmatch(text):
            return dt.date.fromisoformat(text).isoformat()
        if _ISO_TIMESTAMP.fullmatch(text):
            moment = dt.datetime.fromisoformat(text)
            if moment.tzinfo is not None:
                moment = moment.astimezone(dt.UTC)
            return moment.date().isoformat()
    except ValueError:
        pass
    given = value if shown is None else shown
    msg = f"{name} {given!r} is not a date: give YYYY-MM-DD (or a full ISO timestamp)"
    raise ValueError(msg)


def partition_value(key: str, ingest_date: str, runner_kind: str | None, source_path: str) -> str:
    """The hive value of partition ``key`` for one run, escaped for a directory name."""
    if key == "ingest_date":
        value = ingest_date
    elif key == "ingest_month":
        value = ingest_date[:7]
    elif key == "runner_kind":
        value = runner_kind or "unknown"
    else:
        value = Path(source_path).parent.name or "."
    return quote(value, safe="-_.")
