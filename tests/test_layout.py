"""The package's imports run one way: cli → {serve, bench, doctor} → options → core → plookup.native.

Read with `ast` from the source, imports inside functions included: no cycle anywhere (a package's
``__init__`` re-exporting its own children does not count), nothing imports cli, the core never
imports options, serve, bench or cli, native imports nothing of plookup, and serve and bench leave
each other alone.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"plookup": ROOT / "plookup", "plookup.native": ROOT / "native"}
# The layers above the core, by the first part of the module name after "plookup.".
LAYERS = {"cli": 3, "serve": 2, "bench": 2, "doctor": 2, "options": 1}
COMMANDS = ("serve", "bench", "doctor")


def modules() -> dict[str, Path]:
    found = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


def is_package(name: str, known: dict[str, Path]) -> bool:
    return known[name].name == "__init__.py"


def imported(name: str, node: ast.AST, known: dict[str, Path]) -> list[str]:
    """The plookup modules an import statement in module `name` loads."""
    if isinstance(node, ast.Import):
        targets = [alias.name for alias in node.names]
    else:
        base = name if is_package(name, known) else name.rpartition(".")[0]
        for _ in range(node.level - 1):
            base = base.rpartition(".")[0]
        module = node.module if node.level == 0 else ".".join(p for p in (base, node.module) if p)
        # `from package import child` loads the child module; `from module import name` the module.
        targets = [f"{module}.{alias.name}" if f"{module}.{alias.name}" in known else module for alias in node.names]
    resolved = []
    for target in targets:
        while target and target not in known and "." in target:
            target = target.rpartition(".")[0]
        if target in known:
            resolved.append(target)
    return resolved


def import_graph(known: dict[str, Path]) -> dict[str, set[str]]:
    graph = {name: set() for name in known}
    for name, path in known.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in imported(name, node, known):
                    own_child = is_package(name, known) and target.startswith(name + ".")
                    if target != name and not own_child:
                        graph[name].add(target)
    return graph


def layer(name: str) -> str:
    if name == "plookup.native" or name.startswith("plookup.native."):
        return "native"
    first = name.split(".")[1] if name.count(".") else ""
    return first if first in LAYERS else "core"


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node):
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def violations(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for source, targets in graph.items():
        for target in targets:
            a, b = layer(source), layer(target)
            if b == "cli":
                bad.append(f"{source} imports the command line ({target})")
            elif a == "native" and b != "native":
                bad.append(f"{source}: native kernels import nothing of plookup ({target})")
            elif a in ("core", "native") and b in LAYERS:
                bad.append(f"core module {source} imports {target}")
            elif a == "options" and b in COMMANDS:
                bad.append(f"{source} imports {target}")
            elif a in COMMANDS and b in COMMANDS and a != b:
                bad.append(f"{source} imports its sibling {target}")
    return bad


def test_the_package_is_where_this_test_looks():
    known = modules()
    assert {"plookup.decoder", "plookup.verify", "plookup.cli", "plookup.options", "plookup.serve.app",
            "plookup.bench.command", "plookup.native.suffix_automaton"} <= set(known)  # fmt: skip


def test_no_import_cycle_and_imports_run_one_way():
    graph = import_graph(modules())
    assert find_cycle(graph) is None, f"import cycle: {' -> '.join(find_cycle(graph))}"
    assert violations(graph) == []


def test_the_check_catches_a_cycle_and_a_core_module_importing_serve():
    graph = import_graph(modules())
    graph["plookup.verify"] = graph["plookup.verify"] | {"plookup.serve.app"}  # serve.app imports the decoder
    assert find_cycle(graph) is not None
    assert violations(graph) == ["core module plookup.verify imports plookup.serve.app"]


@pytest.mark.parametrize(
    "source, statement, expected",
    [
        ("plookup.decoder", "from .verify import accept", {"plookup.verify"}),
        ("plookup.bench.command", "from ..options import model_kwargs", {"plookup.options"}),
        ("plookup.cli", "from .bench import command", {"plookup.bench.command"}),
        ("plookup.suffix_index", "from .native import suffix_automaton", {"plookup.native.suffix_automaton"}),
        ("plookup.bench.systems", "import plookup.decoder", {"plookup.decoder"}),
        ("plookup.decoder", "import numpy", set()),
    ],
)
def test_imports_are_resolved_to_modules(source, statement, expected):
    known = modules()
    assert set(imported(source, ast.parse(statement).body[0], known)) == expected


def test_pyproject_ships_every_package():
    """setuptools installs only the packages pyproject lists by hand (a non-editable install of a
    folder it misses would fail on import)."""
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    folders = {name for name, path in modules().items() if path.name == "__init__.py"}
    assert listed == folders
    assert config["package-dir"] == {"plookup.native": "native"}
