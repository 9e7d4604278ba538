"""The charts' script (Vega, Vega-Lite and vega-embed) the page inlines to open offline.

Bundling it takes seconds and depends only on the versions, so it is bundled once per
machine into a cache folder, on a thread of its own while the runs are replayed.
"""

from __future__ import annotations

import contextlib
import os
import threading
from concurrent.futures import Future
from functools import cache
from importlib.metadata import version
from pathlib import Path

#: The bundled script's entry point: vega-embed as a global the page calls.
_ENTRY = "window.vegaEmbed = vegaEmbed;"


@cache
def _vega_script() -> str:
    """Vega, Vega-Lite and vega-embed as one script, for the version Altair writes.

    Bundling takes seconds (longer than reading a few hundred runs), and the result
    depends only on the versions: it is kept in :func:`_script_cache` and read from
    there by later reports (rebuilt when missing or unreadable).
    """
    import vl_convert as vlc
    from altair.utils._importers import vl_version_for_vl_convert

    from contextledger.output import write_text_atomically

    version = vl_version_for_vl_convert()
    kept = _script_cache() / f"vega-embed-{_vl_convert_version()}-{version}.js"
    try:
        text = kept.read_text(encoding="utf-8")
        if "window.vegaEmbed=" in text[-200:]:  # written whole (atomically), by us
            return text
    except (OSError, UnicodeDecodeError):
        pass
    text = vlc.javascript_bundle(_ENTRY, version)
    with contextlib.suppress(OSError):  # a read-only home: bundle again next time
        write_text_atomically(kept, text)
    return text


_bundling: Future[str] | None = None
_bundling_lock = threading.Lock()


def _bundle_soon() -> Future[str]:
    """:func:`_vega_script` on a thread of its own, started once: a machine's first
    report bundles it (seconds, outside the GIL) while the runs are replayed."""
    global _bundling
    with _bundling_lock:
        if _bundling is None:
            future: Future[str] = Future()

            def bundle() -> None:
                try:
                    future.set_result(_vega_script())
                except BaseException as error:  # handed to whoever waits for it
                    future.set_exception(error)

            threading.Thread(target=bundle, name="vega-bundle", daemon=True).start()
            _bundling = future
        return _bundling


def _vl_convert_version() -> str:
    return version("vl-convert-python")


def _script_cache() -> Path:
    """Where the bundled chart script is kept: ``$CONTEXTLEDGER_CACHE``, else
    ``$XDG_CACHE_HOME/contextledger``, else ``~/.cache/contextledger``."""
    configured = os.environ.get("CONTEXTLEDGER_CACHE")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "contextledger"
