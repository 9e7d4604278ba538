"""bench/cli.py's reference: pinned to the versions that made the corpus, and a clear
reason (never a traceback) when it cannot be run here. No timing in tests."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

from .conftest import require_corpus

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / "bench" / "reference"


def bench_cli():
    spec = importlib.util.spec_from_file_location("bench_cli", REPO / "bench" / "cli.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_reference_pins_the_versions_that_made_the_corpus() -> None:
    manifest = json.loads((require_corpus() / "oracle" / "manifest.json").read_text())
    package = json.loads((REFERENCE / "package.json").read_text())
    lock = json.loads((REFERENCE / "package-lock.json").read_text())
    assert package["agentfootprint"]["version"] == manifest["agentfootprint_version"]
    assert package["agentfootprint"]["commit"] == manifest["agentfootprint_commit"]
    assert package["dependencies"]["footprintjs"] == manifest["footprintjs_version"]
    assert (
        lock["packages"]["node_modules/footprintjs"]["version"] == manifest["footprintjs_version"]
    )


@pytest.fixture
def with_node(monkeypatch: pytest.MonkeyPatch):
    cli = bench_cli()
    monkeypatch.setattr(cli.shutil, "which", lambda tool: f"/usr/bin/{tool}")
    return cli


def test_without_source_the_reason_names_the_flag(with_node, tmp_path: Path) -> None:
    with pytest.raises(with_node.Unavailable, match="--agentfootprint-src"):
        with_node.prepare_reference(None, tmp_path)


def test_a_checkout_of_another_version_is_refused(with_node, tmp_path: Path) -> None:
    (tmp_path / "package.json").write_text('{"name": "agentfootprint", "version": "9.102.0"}')
    with pytest.raises(
        with_node.Unavailable, match=re.escape("is agentfootprint 9.102.0, not 9.62.0")
    ):
        with_node.prepare_reference(tmp_path, tmp_path)


def test_a_folder_that_is_no_checkout_is_refused(with_node, tmp_path: Path) -> None:
    with pytest.raises(with_node.Unavailable, match="not an agentfootprint checkout"):
        with_node.prepare_reference(tmp_path, tmp_path)


def test_without_node_the_reason_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cli = bench_cli()
    monkeypatch.setattr(cli.shutil, "which", lambda tool: None)
    with pytest.raises(cli.Unavailable, match="node is not on PATH"):
        cli.prepare_reference(tmp_path, tmp_path)
