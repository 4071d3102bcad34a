"""Issue 24's limits on the package's shape, read with `ast` from the source: no function (or
method, nested ones included) in plookup/ above 60 lines, and no module of the core (plookup/
outside plookup/app/) above 300 lines. A function's lines run from its ``def`` to its last line,
decorators excluded; a module's are its lines of text. Where one grows past them, split it by job
(a module or a function with one purpose each), not by line count.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "plookup"
MAX_FUNCTION_LINES = 60
MAX_CORE_MODULE_LINES = 300


def function_sizes(source: str) -> list[tuple[str, int, int]]:
    """(qualified name, first line, lines) of every function and method in the source."""
    found = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                found.append((name, child.lineno, child.end_lineno - child.lineno + 1))
                visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return found


def oversized(package: Path = PACKAGE) -> list[str]:
    """A line for each function over MAX_FUNCTION_LINES and each core module over
    MAX_CORE_MODULE_LINES in the package folder `package`."""
    bad = []
    for path in sorted(package.rglob("*.py")):
        source = path.read_text()
        where = path.relative_to(package.parent)
        lines = len(source.splitlines())
        core = path.relative_to(package).parts[0] != "app"
        if core and lines > MAX_CORE_MODULE_LINES:
            bad.append(f"{where}: {lines} lines (a core module has at most {MAX_CORE_MODULE_LINES})")
        for name, first, size in function_sizes(source):
            if size > MAX_FUNCTION_LINES:
                bad.append(f"{where}:{first} {name}: {size} lines (a function has at most {MAX_FUNCTION_LINES})")
    return bad


def test_no_function_or_core_module_is_too_long():
    bad = oversized()
    assert not bad, "too long (split by job):\n" + "\n".join(bad)


def test_the_package_is_where_this_test_looks():
    assert (PACKAGE / "api" / "llama.py").is_file() and (PACKAGE / "app" / "cli.py").is_file()


def test_a_function_counts_from_def_to_its_last_line():
    source = (
        "@decorator\ndef f():\n    x = 1\n\n    return x\n\n\n"
        "class C:\n    def m(self):\n        def inner():\n            pass\n\n    async def a(self):\n        pass\n"
    )
    assert function_sizes(source) == [("f", 2, 4), ("C.m", 9, 3), ("C.m.inner", 10, 2), ("C.a", 13, 2)]


def test_the_check_names_a_long_function_and_a_long_core_module(tmp_path):
    package = tmp_path / "plookup"
    (package / "index").mkdir(parents=True)
    (package / "app").mkdir()
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES - 1))
    (package / "index" / "short.py").write_text(f"def fits():\n{body}")  # 60 lines: allowed
    (package / "index" / "long.py").write_text(f"def long():\n{body}    return 0\n" + "\n" * 300)
    (package / "app" / "commands.py").write_text("x = 0\n" * 400)  # app's modules have no limit
    assert oversized(package) == [
        f"plookup/index/long.py: 361 lines (a core module has at most {MAX_CORE_MODULE_LINES})",
        f"plookup/index/long.py:1 long: 61 lines (a function has at most {MAX_FUNCTION_LINES})",
    ]
