"""Where to print a few points' names so that no name covers another or a point."""

from __future__ import annotations

import itertools
from typing import Any

import polars as pl


def place_labels(
    points: pl.DataFrame,
    x: str,
    y: str,
    tops: tuple[float, float],
    size: tuple[int, int],
    *,
    radius: str | None = None,
    most: int = 8,
) -> pl.DataFrame:
    """The points worth naming, each with where its label goes so that it overlaps no
    other label and stays inside the plot: ``label_x``, ``label_y`` (in the axes' units)
    and ``align`` (``left``: the text starts there). Points are taken most important
    first (largest ``x``, then largest ``y``, alternately), at most ``most``; one whose
    label fits nowhere is left to its tooltip; no label covers a point. ``tops`` are
    the axes' upper ends (both start at 0), ``size`` the plot's width and height in
    pixels, ``radius`` a column of each point's radius in pixels.

    >>> frame = pl.DataFrame({"id": ["alpha", "beta", "c"], "x": [10, 10, 1], "y": [5, 5, 0]})
    >>> placed = place_labels(frame, "x", "y", (11, 6), (200, 100))
    >>> placed.select("id", "align", pl.col("label_y").round(2)).rows()
    [('alpha', 'right', 5.0), ('beta', 'right', 5.78), ('c', 'left', 0.78)]
    """
    (x_top, y_top), (width, height) = tops, size
    by_x = points.sort([x, y], descending=True, maintain_order=True)["id"].to_list()
    by_y = points.sort([y, x], descending=True, maintain_order=True)["id"].to_list()
    order = list(dict.fromkeys(i for pair in itertools.zip_longest(by_x, by_y) for i in pair))
    where = {row["id"]: row for row in points.iter_rows(named=True)}

    def centre(row: dict[str, Any]) -> tuple[float, float, float]:
        r = row[radius] if radius else 4.0
        return row[x] / x_top * width, height - row[y] / y_top * height, r

    marks = [centre(row) for row in where.values()]
    taken = [(px - r, py - r, px + r, py + r) for px, py, r in marks]  # no label on a point
    chosen: list[dict[str, Any]] = []
    for name in order:
        if name is None or len(chosen) >= most:
            continue
        row = where[name]
        px, py, r = centre(row)
        gap = r + 4
        wide = 6.0 * len(str(name)) + 2
        for align, dy in (("left", 0), ("right", 0), ("left", -13), ("left", 13),
                          ("right", -13), ("right", 13)):  # fmt: skip
            start = px + gap if align == "left" else px - gap
            left = start if align == "left" else start - wide
            box = (left, py + dy - 6, left + wide, py + dy + 6)
            inside = box[0] >= 0 and box[2] <= width and box[1] >= -4 and box[3] <= height + 4
            if inside and not any(_overlap(box, other) for other in taken):
                taken.append(box)
                at = {"label_x": start / width * x_top, "label_y": (height - py - dy) / height}
                chosen.append({**row, **at, "align": align})
                chosen[-1]["label_y"] *= y_top
                break
    extra = {"label_x": pl.Float64, "label_y": pl.Float64, "align": pl.String}
    return pl.DataFrame(chosen, schema={**dict(points.schema), **extra})


def _overlap(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]
