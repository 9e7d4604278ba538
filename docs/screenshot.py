"""Regenerate docs/report.png, the README's picture of the report.

Runs ``contextledger report`` on the bundled sample (or on ``--runs``: snapshots, an
archive) into a temporary folder and screenshots the page with headless Chromium,
offline (the page fetches nothing), so the picture is always the page the current code
writes; a tall ``--height`` takes the whole page, to read it as a reviewer would:

    .venv/bin/python docs/screenshot.py [OUT.png] [--width 1280] [--height 1500] [--runs PATH]

Chromium is ``$CHROMIUM`` or the first of chromium, chromium-browser, google-chrome on
PATH. Exit status 0 when the PNG is written, 1 when the report or the browser fails.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: Headless and offline: no sandbox (CI runs as root), no background connections.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--virtual-time-budget=10000",
)


#: The report's options: no chart files (the page draws its charts), then its folder.
_OPTIONS = ("--charts", "none", "-o")


def find_chromium() -> str | None:
    """$CHROMIUM, else the first Chromium on PATH."""
    if os.environ.get("CHROMIUM"):
        return shutil.which(os.environ["CHROMIUM"])
    names = ("chromium", "chromium-browser", "google-chrome")
    return next((found for name in names if (found := shutil.which(name))), None)


def contextledger_command() -> list[str]:
    """The installed command beside this interpreter (the virtualenv's), else on PATH."""
    beside = Path(sys.executable).parent / "contextledger"
    return [str(beside if beside.exists() else shutil.which("contextledger") or "contextledger")]


def screenshot(out: Path, width: int, height: int, runs: list[str] | None = None) -> None:
    """Write the report of ``runs`` (default: the bundled sample) and its screenshot to
    ``out``; raise on any failure."""
    browser = find_chromium()
    if browser is None:
        raise RuntimeError("no Chromium found: install chromium or set $CHROMIUM to one")
    with tempfile.TemporaryDirectory() as work:
        page_dir = Path(work) / "report"
        subprocess.run(
            [*contextledger_command(), "report", *(runs or []), *_OPTIONS, str(page_dir)],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        out.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                browser,
                *CHROMIUM_FLAGS,
                f"--user-data-dir={Path(work) / 'profile'}",
                f"--window-size={width},{height}",
                f"--screenshot={out.resolve()}",
                (page_dir / "report.html").resolve().as_uri(),
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
    if not out.exists() or out.read_bytes()[:8] != b"\x89PNG\r\n\x1a\n":
        raise RuntimeError(f"{browser} wrote no PNG at {out}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, default=HERE / "report.png")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=1500)
    parser.add_argument(
        "--runs", action="append", help="inputs of the report (default: the bundled sample)"
    )
    args = parser.parse_args(argv)
    try:
        screenshot(args.out, args.width, args.height, args.runs)
    except (OSError, RuntimeError, subprocess.SubprocessError) as problem:
        print(f"screenshot: {problem}", file=sys.stderr)
        return 1
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
