"""Vega-Lite specs drawn as SVG and PNG (vl-convert), here or spread over worker processes.

Drawing is the report's largest cost of its own (the corpus's six charts: about 2 s of
CPU, more than reading the runs), and vl-convert holds the GIL while it draws, so
threads cannot share it: :func:`draw_all` hands the charts to worker processes while
the caller writes the page. This module imports only vl-convert, so a worker starts
without Altair or the engines. The bytes are the same wherever a chart is drawn.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

#: Fewer charts than this are drawn in this process: a worker's start and its own
#: vl-convert (about 0.4 s of CPU each) would cost more than it saves.
POOL_FROM_CHARTS = 3


def draw(
    spec: Mapping[str, Any], formats: Sequence[str], *, scale: float, vl_version: str
) -> dict[str, bytes]:
    """A chart's Vega-Lite ``spec`` drawn as each of ``formats`` (``svg``, ``png``).

    Vega lays the chart out once, as SVG; the PNG is that SVG rasterized (the bytes
    vl-convert's own PNG export gives, at half the cost).

    >>> spec = {"mark": "point", "data": {"values": [{"x": 1}]},
    ...         "encoding": {"x": {"field": "x", "type": "quantitative"}}}
    >>> sorted(draw(spec, ("png", "svg"), scale=1, vl_version="v6_4"))
    ['png', 'svg']
    """
    import vl_convert as vlc

    for name in formats:
        if name not in ("svg", "png"):
            msg = f"a chart is drawn as svg or png, not {name!r}"
            raise ValueError(msg)
    if not formats:
        return {}
    svg = vlc.vegalite_to_svg(dict(spec), vl_version=vl_version)
    out = {}
    for name in formats:
        out[name] = svg.encode("utf-8") if name == "svg" else vlc.svg_to_png(svg, scale=scale)
    return out


class Drawing:
    """Charts being drawn (:func:`draw_all`, :func:`start_drawing`): :meth:`add` hands
    more over, :meth:`images` waits for one chart's (or draws it here, without workers);
    :meth:`close` (or leaving a ``with`` block) ends the workers."""

    def __init__(
        self,
        specs: Mapping[str, Mapping[str, Any]],
        formats: Sequence[str],
        *,
        scale: float,
        vl_version: str,
        futures: Mapping[str, Future[dict[str, bytes]]] | None = None,
        pool: ProcessPoolExecutor | None = None,
    ) -> None:
        self.specs = dict(specs)
        self.formats, self.scale, self.vl_version = tuple(formats), scale, vl_version
        self.futures = None if futures is None else dict(futures)
        self.pool = pool

    def add(self, specs: Mapping[str, Mapping[str, Any]]) -> None:
        """Draw ``specs`` too (by name): in the workers, largest first, or here when
        :meth:`images` asks for one."""
        self.specs.update(specs)
        if self.futures is None or self.pool is None:
            return
        try:
            for name in sorted(specs, key=lambda name: -len(repr(specs[name]))):
                self.futures[name] = self.pool.submit(
                    draw, specs[name], self.formats, scale=self.scale, vl_version=self.vl_version
                )
        except BaseException:
            self.close()
            raise

    def images(self, name: str) -> dict[str, bytes]:
        """Chart ``name``'s images, once drawn (here, without workers)."""
        if self.futures is None:
            spec = self.specs[name]
            return draw(spec, self.formats, scale=self.scale, vl_version=self.vl_version)
        return self.futures[name].result()

    def __enter__(self) -> Drawing:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the workers (a chart still being drawn is not waited for)."""
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.pool = None


def draw_all(
    specs: Mapping[str, Mapping[str, Any]],
    formats: Sequence[str],
    *,
    vl_version: str,
    scale: float = 2.0,
    workers: int | None = None,
) -> Drawing:
    """Start drawing every spec of ``specs`` (by name) as ``formats``; returns at once.

    With ``workers`` (default: the machine's cores) above one and at least
    :data:`POOL_FROM_CHARTS` charts, they are drawn in that many worker processes
    (:func:`~contextledger.processes.worker_pool`), largest first; otherwise here, one
    at a time as :meth:`Drawing.images` asks for it.

    >>> spec = {"mark": "point", "data": {"values": [{"x": 1}]},
    ...         "encoding": {"x": {"field": "x", "type": "quantitative"}}}
    >>> with draw_all({"a": spec, "b": spec}, ("svg",), vl_version="v6_4") as drawing:
    ...     sorted(drawing.images("b"))
    ['svg']
    """
    here = Drawing(specs, formats, scale=scale, vl_version=vl_version)
    count = min(workers or os.cpu_count() or 1, len(specs))
    if not formats or count <= 1 or len(specs) < POOL_FROM_CHARTS:
        return here
    return _in_workers(specs, formats, scale=scale, vl_version=vl_version, workers=count)


def start_drawing(formats: Sequence[str], *, vl_version: str, scale: float = 2.0) -> Drawing:
    """A drawing in one worker process, started before its charts are known (hand them
    over with :meth:`Drawing.add`): charts whose frames are ready early (the report's
    ledger charts) are drawn while the rest is computed, and vl-convert starts once
    (about 0.45 s of CPU a process: :func:`draw_all`'s two workers pay it twice).

    >>> spec = {"mark": "point", "data": {"values": [{"x": 1}]},
    ...         "encoding": {"x": {"field": "x", "type": "quantitative"}}}
    >>> with start_drawing(("svg",), vl_version="v6_4") as drawing:
    ...     drawing.add({"a": spec})
    ...     sorted(drawing.images("a"))
    ['svg']
    """
    return _in_workers({}, formats, scale=scale, vl_version=vl_version, workers=1)


def _in_workers(
    specs: Mapping[str, Mapping[str, Any]],
    formats: Sequence[str],
    *,
    scale: float,
    vl_version: str,
    workers: int,
) -> Drawing:
    """:class:`Drawing` of ``specs`` in ``workers`` worker processes (none without
    ``formats``: nothing to draw)."""
    if not formats:
        return Drawing(specs, formats, scale=scale, vl_version=vl_version)
    from contextledger.processes import worker_pool

    drawing = Drawing({}, formats, scale=scale, vl_version=vl_version)
    drawing.pool, drawing.futures = worker_pool(workers), {}
    if specs:
        drawing.add(specs)
    return drawing
