"""The bundled sample: 14 recorded runs with their outcome labels and standings.

It ships inside the package (a wheel holds the repository's ``data/`` as
``contextledger/_data``), so ``report`` and ``synth --snapshots`` find it from the
installed package whatever the working folder; a source checkout or an editable install
reads the repository's own ``data/`` beside ``src/``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parents[1]
#: Where a wheel puts ``data/`` (pyproject's force-include), then where a checkout keeps it.
DATA_DIRS = (_PACKAGE / "_data", _PACKAGE.parents[1] / "data")


@dataclass(frozen=True)
class Sample:
    """The bundled sample: runs, their outcome labels, and the fact bench's standings."""

    runs: Path
    outcomes: Path
    standings: Path


def sample(data_dirs: tuple[Path, ...] = DATA_DIRS) -> Sample:
    """Paths of the bundled sample, from the first of ``data_dirs`` that holds it.

    >>> sample().runs.name
    'sample'
    """
    for data in data_dirs:
        if (data / "sample").is_dir():
            return Sample(
                data / "sample", data / "sample-outcomes.csv", data / "sample-standings.csv"
            )
    places = " or ".join(str(data / "sample") for data in data_dirs)
    raise FileNotFoundError(
        f"the bundled sample is not at {places} (a damaged install?): give PATHs"
    )
