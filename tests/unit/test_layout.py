"""The package's folders are the stages of the flow, and imports run one way along it:

    native → index → draft → verify → engine → measure → api → app

A module imports only modules of its own stage or an earlier one (``plookup.files``, where files
are kept, and ``plookup.log``, what a load says, are below every stage; the package's ``__init__`` re-exports the public names, which the
commands may import). Inside
``app`` the commands stack the same way: cli → {serve, bench, doctor, corpus_command, rpc_command} → options,
and serve and bench leave each other alone.

Read with `ast` from the source, imports inside functions included: no cycle anywhere (a package's
``__init__`` re-exporting its own children does not count).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"plookup": ROOT / "plookup"}
STAGES = ("native", "index", "draft", "verify", "engine", "measure", "api", "app")
BASE = {"plookup.files", "plookup.log"}  # below every stage
# The parts of app by the name after "plookup.app.": the command line, its commands, their options.
APP_LAYERS = ("cli", "serve", "bench", "doctor", "corpus_command", "rpc_command", "options")
COMMANDS = ("serve", "bench", "doctor", "corpus_command", "rpc_command")


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


def stage(name: str) -> int:
    """The stage's rank; -1 below every stage (plookup.files). The package itself, the public API
    (re-exporting app.models' paths too), ranks with app: commands may `import plookup`."""
    if name in BASE:
        return -1
    parts = name.split(".")
    if len(parts) == 1:
        return STAGES.index("app")
    assert parts[1] in STAGES, f"{name} is in no stage: put it in one of {STAGES}"
    return STAGES.index(parts[1])


def app_layer(name: str) -> str:
    """Inside app: the command a module belongs to, "options", "cli", or "" (shared helpers)."""
    parts = name.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "app" and parts[2] in APP_LAYERS else ""


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
            if stage(target) > stage(source):
                bad.append(f"{source} imports {target}, a later stage")
                continue
            a, b = app_layer(source), app_layer(target)
            if b == "cli" and a != "cli":
                bad.append(f"{source} imports the command line ({target})")
            elif a == "options" and b in COMMANDS:
                bad.append(f"{source} imports {target}")
            elif a in COMMANDS and b in COMMANDS and a != b:
                bad.append(f"{source} imports its sibling {target}")
            elif b and not a and stage(source) == stage(target):
                bad.append(f"the shared helper {source} imports the command's {target}")
    return bad


def test_the_package_is_where_this_test_looks():
    known = modules()
    assert {"plookup.api.llama", "plookup.verify.accept", "plookup.app.cli", "plookup.app.options",
            "plookup.app.serve.app", "plookup.app.bench.command", "plookup.native.suffix_automaton"} <= set(known)


def test_no_import_cycle_and_imports_run_one_way():
    graph = import_graph(modules())
    assert find_cycle(graph) is None, f"import cycle: {' -> '.join(find_cycle(graph))}"
    assert violations(graph) == []


def test_every_module_is_in_a_stage():
    for name in modules():
        stage(name)


def test_the_check_catches_a_cycle_and_an_import_against_the_flow():
    graph = import_graph(modules())
    graph["plookup.verify.logprobs"] = graph["plookup.verify.logprobs"] | {"plookup.app.serve.app"}  # serve.app imports the API
    assert find_cycle(graph) is not None
    assert violations(graph) == ["plookup.verify.logprobs imports plookup.app.serve.app, a later stage"]
    graph = import_graph(modules())
    graph["plookup.index.memory"] = graph["plookup.index.memory"] | {"plookup.draft.policy"}
    assert find_cycle(graph) is None
    assert violations(graph) == ["plookup.index.memory imports plookup.draft.policy, a later stage"]
    graph = import_graph(modules())
    graph["plookup.app.bench.systems"] = graph["plookup.app.bench.systems"] | {"plookup.app.serve.app"}
    assert violations(graph) == ["plookup.app.bench.systems imports its sibling plookup.app.serve.app"]


@pytest.mark.parametrize(
    "source, statement, expected",
    [
        ("plookup.api.llama", "from ..verify.accept import accept", {"plookup.verify.accept"}),
        ("plookup.api.llama", "from ..verify import accept", {"plookup.verify.accept"}),
        ("plookup.app.bench.command", "from ..options import model_kwargs", {"plookup.app.options"}),
        ("plookup.app.cli", "from .bench import command", {"plookup.app.bench.command"}),
        ("plookup.index.suffix", "from ..native import suffix_automaton", {"plookup.native.suffix_automaton"}),
        ("plookup.app.bench.systems", "import plookup.api.llama", {"plookup.api.llama"}),
        ("plookup.api.llama", "import numpy", set()),
    ],
)
def test_imports_are_resolved_to_modules(source, statement, expected):
    known = modules()
    assert set(imported(source, ast.parse(statement).body[0], known)) == expected


def test_pyproject_ships_every_package():
    """setuptools installs the packages its find rule matches (a non-editable install of a folder
    it missed would fail on import)."""
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    from setuptools import find_packages

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    found = set(find_packages(str(ROOT), include=config["include"], exclude=config.get("exclude", ())))
    folders = {name for name, path in modules().items() if path.name == "__init__.py"}
    assert found == folders


def test_the_package_imports_nothing_of_the_checkouts_benchmarks():
    """benchmarks/ (the editors' and servers' harness, the agent sessions) runs from a checkout and is
    not installed: it may import plookup, never the other way round."""
    found = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = ([a.name for a in node.names] if isinstance(node, ast.Import)
                       else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            found += [f"{name} imports {t}" for t in targets if t.split(".")[0] == "benchmarks"]
    assert not found, found


def test_no_two_test_files_share_a_name():
    """pytest imports test files by their basename (the folders are not packages): two of one name
    in different folders stop a run over all of tests/ (the exact leg's) at collection; the
    harness's tests beside it in benchmarks/ run in the same runs."""
    seen: dict[str, Path] = {}
    clashes = []
    for path in sorted([*(ROOT / "tests").rglob("test_*.py"), *(ROOT / "benchmarks").glob("*/tests/test_*.py")]):
        if path.name in seen:
            clashes.append((seen[path.name].relative_to(ROOT), path.relative_to(ROOT)))
        seen[path.name] = path
    assert not clashes, clashes
