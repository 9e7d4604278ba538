"""The package's layers, read from its own imports: every arrow points down.

``read`` (bytes -> typed runs) -> ``tables`` (one schema, every table's builder) ->
the engines ``ledger`` and ``window`` and the storage ``archive`` (layout, commits,
selection; it knows the schema, no engine), side by side and unaware of each other
-> ``jobs`` (a source wired to an engine: ingest, what-if over a source, synth) ->
``charts`` -> ``report`` -> ``cli``. A module may import its own package and any
layer below, never one beside or above it; imports inside functions count too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "contextledger"

#: Each top-level part of the package and its layer; parts of one layer may not
#: import each other.
LAYERS = {
    "output": 0,  # files written whole, text a terminal shows as text: imports nothing
    "processes": 0,  # worker pools whose workers die with their parent: imports nothing
    "progress": 0,  # one progress line on a terminal, for ingest, synth, whatif: imports nothing
    "read": 1,
    "drawing": 1,  # Vega-Lite drawn as SVG and PNG, here or in workers: imports processes
    "tables": 2,
    "ledger": 3,
    "window": 3,
    "archive": 3,
    "jobs": 4,
    "charts": 5,
    "report": 6,
    "cli": 7,
}


def part_of(module: str) -> str | None:
    """``contextledger.read.snapshot`` -> ``read``; the package root -> None."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "contextledger" else None


def imports_of(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every ``contextledger`` import in ``path``, at any depth."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
            submodules = [f"{node.module}.{alias.name}" for alias in node.names]
            if all(_is_module(name) for name in submodules):  # ``from jobs import synth``
                names = submodules
            found += [(node.lineno, name) for name in names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
    return [(line, name) for line, name in found if name.startswith("contextledger.")]


def _is_module(name: str, package: Path = PACKAGE) -> bool:
    parts = name.split(".")[1:]
    return (package.joinpath(*parts).with_suffix(".py")).is_file() or (
        package.joinpath(*parts, "__init__.py").is_file()
    )


def module_name(path: Path, package: Path = PACKAGE) -> str:
    """``.../contextledger/read/snapshot.py`` -> ``contextledger.read.snapshot``."""
    parts = path.relative_to(package).with_suffix("").parts
    return ".".join(("contextledger", *parts)).removesuffix(".__init__")


def import_cycles(package: Path = PACKAGE) -> list[list[str]]:
    """Groups of modules that import each other, directly or through others."""
    modules = {module_name(path, package): path for path in package.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        graph[module] = set()
        for _, imported in imports_of(path):
            while imported not in modules and "." in imported:
                imported = imported.rsplit(".", 1)[0]
            if imported in modules and imported != module:
                graph[module].add(imported)
    cycles, done = [], set()
    for start in sorted(graph):  # a module that reaches itself is in a cycle
        if start in done:
            continue
        seen, todo = set(), list(graph[start])
        while todo:
            module = todo.pop()
            if module not in seen:
                seen.add(module)
                todo.extend(graph[module])
        if start in seen:
            group = sorted(m for m in seen if start in _reach(graph, m))
            cycles.append(group)
            done.update(group)
    return cycles


def _reach(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        module = todo.pop()
        for imported in graph[module]:
            if imported not in seen:
                seen.add(imported)
                todo.append(imported)
    return seen


def upward_imports(package: Path = PACKAGE) -> list[str]:
    """Every import that points sideways or up, as ``file:line imports module``."""
    wrong = []
    for path in sorted(package.rglob("*.py")):
        here = part_of(module_name(path, package))
        if here is None:  # the package root re-exports the public surface, lazily
            continue
        for line, imported in imports_of(path):
            there = part_of(imported)
            if there is None or there == here:
                continue
            if LAYERS[there] >= LAYERS[here]:
                wrong.append(f"{path.relative_to(package)}:{line} imports {imported}")
    return wrong


def test_every_part_of_the_package_has_a_layer():
    parts = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()}
    parts = {p for p in parts if not p.startswith("_") and p not in ("py", "")}
    assert parts - {"__init__"} <= set(LAYERS), sorted(parts - set(LAYERS))


def test_every_import_points_down():
    assert upward_imports() == []


def test_the_command_line_is_the_top_layer():
    """Nothing imports ``cli``; its command modules share only ``cli.common`` (options,
    reading, writing) and ``cli.terminal`` (tables for people), never each other."""
    assert max(LAYERS, key=LAYERS.__getitem__) == "cli"
    assert sorted(LAYERS.values())[-2] < LAYERS["cli"]
    shared = {"common", "terminal"}
    commands = [p for p in (PACKAGE / "cli").glob("*.py") if p.stem not in {"__init__", *shared}]
    assert commands, "cli/ is a package of command modules"
    for path in commands:
        within = {name for _, name in imports_of(path) if part_of(name) == "cli"}
        assert within <= {f"contextledger.cli.{name}" for name in shared}, (path.name, within)
    terminal = {name for _, name in imports_of(PACKAGE / "cli" / "terminal.py")}
    assert not {name for name in terminal if part_of(name) == "cli"}


def test_no_modules_import_each_other():
    """Within a layer too (``read/slice.py`` and ``read/snapshot.py`` once did)."""
    assert import_cycles() == []


@pytest.mark.parametrize(
    ("part", "line", "fine"),
    [
        ("archive/store.py", "from contextledger.ledger.compute import piece_totals", False),
        ("window/kernel.py", "from contextledger.ledger import stats", False),
        ("read/slice.py", "from contextledger.tables import schema", False),
        ("jobs/ingest.py", "from contextledger.archive import store", True),
        ("ledger/gates.py", "    from contextledger.tables.build import RunTables", True),
    ],
)
def test_the_check_sees_sideways_and_upward_imports(tmp_path, part, line, fine):
    module = tmp_path / "contextledger" / part
    module.parent.mkdir(parents=True)
    body = line if not line.startswith(" ") else f"def lazily():\n{line}\n"
    module.write_text(body + "\n", encoding="utf-8")
    assert (upward_imports(tmp_path / "contextledger") == []) is fine


def test_the_check_sees_a_circle_even_through_a_lazy_import(tmp_path):
    package = tmp_path / "contextledger"
    (package / "read").mkdir(parents=True)
    (package / "read" / "first.py").write_text("from contextledger.read.second import f\n")
    (package / "read" / "second.py").write_text(
        "def f():\n    from contextledger.read.first import g\n"
    )
    (package / "read" / "third.py").write_text("from contextledger.read.first import f\n")
    assert import_cycles(package) == [["contextledger.read.first", "contextledger.read.second"]]
