"""The README's module map (section "How it works") against the tree on disk.

The map is the fenced block that starts with ``plookup/``: one entry per folder, its key (``name/``,
or ``name.py`` for a top-level module) indented two spaces per level, its text on the same line and
on continuation lines indented at least as far as the first entry's text. In an entry's text a
module is written with its ``.py`` and a package with its ``/``; every other word is prose. So:

- every package folder of plookup/ (one with an ``__init__.py``) has an entry, and every entry is a
  folder (or top-level module) that exists;
- a folder's names (those in its entry's text, and the keys of the entries nested in it) are
  exactly its modules (``__init__.py`` aside) and packages; a top-level module's entry names nothing;
- the paragraph after the block that introduces ``benchmarks/`` names each of its folders
  (``name/``), and no other.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "plookup"
BENCHMARKS = "benchmarks"
WORD = r"[a-z_][a-z0-9_]*"
MODULE = re.compile(rf"(?<![\w./-])({WORD})\.py\b")
FOLDER = re.compile(rf"(?<![\w./-])({WORD})/(?![\w])")
KEY = re.compile(rf"^( *)({WORD}(?:/|\.py))(?: +(.*))?$")


@dataclass
class Entry:
    path: str  # relative to the package's parent: "plookup/app/serve/", "plookup/files.py"
    line: int  # README line of its key
    text: str = ""
    children: list[str] = field(default_factory=list)  # keys of the entries nested in it

    def named(self) -> set[str]:
        """What the entry names: its text's `name.py` and `name/`, and its nested entries' keys."""
        return ({m + ".py" for m in MODULE.findall(self.text)} | {f + "/" for f in FOLDER.findall(self.text)}
                | set(self.children))


def map_block(readme: str) -> tuple[int, list[str]]:
    """The map's first line number (1-based) and its lines, from the fence after it to the fence."""
    lines = readme.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("```") and i + 1 < len(lines) and lines[i + 1].rstrip() == PACKAGE + "/":
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            return i + 2, lines[i + 1:end]
    raise AssertionError(f"README.md has no fenced block starting with the line '{PACKAGE}/'")


def parse_map(readme: str) -> tuple[dict[str, Entry], list[str]]:
    """The map's entries by path (the package itself first), and what in its shape is wrong."""
    first, lines = map_block(readme)
    root = Entry(PACKAGE + "/", first)
    entries, problems = {root.path: root}, []
    stack = [root]  # the entry at each depth, the package at depth 0
    text_column = None
    for number, line in enumerate(lines[1:], first + 1):
        indent = len(line) - len(line.lstrip(" "))
        if not line.strip():
            continue
        key = KEY.match(line)
        if key and (text_column is None or indent < text_column):
            depth, rest = indent // 2, key.group(3) or ""
            if indent % 2 or not 1 <= depth <= len(stack) or not stack[depth - 1].path.endswith("/"):
                problems.append(f"README.md:{number}: entry {key.group(2)!r} is not indented two spaces "
                                f"under a folder's entry")
                continue
            if text_column is None and rest:
                text_column = line.index(rest)
            parent = stack[depth - 1]
            entry = Entry(parent.path + key.group(2), number, rest)
            parent.children.append(key.group(2))
            entries[entry.path] = entry
            del stack[depth:]
            stack.append(entry)
        elif text_column is not None and indent >= text_column and len(stack) > 1:
            stack[-1].text += " " + line.strip()
        else:
            problems.append(f"README.md:{number}: neither an entry ('  name/  text') nor a continuation "
                            f"line (indented to the text): {line.strip()!r}")
    return entries, problems


def on_disk(folder: Path) -> set[str]:
    """A package folder's modules (`name.py`, __init__.py aside) and packages (`name/`)."""
    return ({p.name for p in folder.glob("*.py") if p.name != "__init__.py"}
            | {p.name + "/" for p in folder.iterdir() if (p / "__init__.py").is_file()})


def compare(where: str, named: set[str], found: set[str], folder: str) -> list[str]:
    return ([f"{where}: {folder}{name} is not named in it" for name in sorted(found - named)]
            + [f"{where}: names {name}, which is not in {folder}" for name in sorted(named - found)])


def map_problems(readme: str, root: Path) -> list[str]:
    """Each disagreement between the README's map and the tree under `root`, one line each."""
    entries, problems = parse_map(readme)
    package = root / PACKAGE
    folders = {p.parent.relative_to(root).as_posix() + "/" for p in package.rglob("__init__.py")}
    for folder in sorted(folders - entries.keys()):
        problems.append(f"README.md map: the folder {folder} has no entry")
    for path, entry in entries.items():
        where = f"README.md:{entry.line}, the map's entry {path}"
        if path.endswith(".py"):
            if not (root / path).is_file():
                problems.append(f"{where}: {path} does not exist")
            elif entry.named():
                problems.append(f"{where}: a module's entry names {sorted(entry.named())}")
        elif path not in folders:
            problems.append(f"{where}: {path} is not a package folder (with an __init__.py)")
        else:
            problems += compare(where, entry.named(), on_disk(root / path), path)
    return problems + benchmarks_problems(readme, root)


def benchmarks_problems(readme: str, root: Path) -> list[str]:
    """The paragraph after the map that introduces `benchmarks/` against that folder's folders."""
    first, lines = map_block(readme)
    after = readme.splitlines()[first + len(lines):]
    paragraphs = "\n".join(after).split("\n\n")
    paragraph = next((p for p in paragraphs if f"`{BENCHMARKS}/`" in p), None)
    if paragraph is None:
        return [f"README.md: no paragraph after the map introduces `{BENCHMARKS}/`"]
    named = {f + "/" for f in FOLDER.findall(paragraph.replace(f"`{BENCHMARKS}/`", ""))}
    found = {p.name + "/" for p in (root / BENCHMARKS).iterdir()
             if p.is_dir() and not p.name.startswith((".", "_"))}
    return compare(f"README.md, the paragraph on `{BENCHMARKS}/`", named, found, BENCHMARKS + "/")


def test_the_readme_map_matches_the_tree():
    problems = map_problems((ROOT / "README.md").read_text(), ROOT)
    assert not problems, "README.md's module map and the tree disagree:\n" + "\n".join(problems)


CONTROL_MAP = """\
# x

```
plookup/
  index/     a request's (suffix.py), a corpus (corpus.py)
  app/       the commands: cli.py, serve/
    serve/   the routes (app.py)
  files.py   where files are kept
```

Beside the package: `benchmarks/` — editors/ (llama.vim), stale/ (gone).
"""


def test_a_missing_module_and_a_stale_name_are_each_reported(tmp_path):
    """The rule can fail: memory.py and benchmarks' agents/ are not named, corpus.py and stale/ are
    named but do not exist, serve/'s entry is fine, and log.py, a top-level module, has no entry."""
    for path in ("plookup/__init__.py", "plookup/files.py", "plookup/log.py", "plookup/index/__init__.py",
                 "plookup/index/suffix.py", "plookup/index/memory.py", "plookup/app/__init__.py",
                 "plookup/app/cli.py", "plookup/app/serve/__init__.py", "plookup/app/serve/app.py",
                 "benchmarks/editors/x.py", "benchmarks/agents/README.md"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("")
    problems = map_problems(CONTROL_MAP, tmp_path)
    assert problems == [
        "README.md:4, the map's entry plookup/: plookup/log.py is not named in it",
        "README.md:5, the map's entry plookup/index/: plookup/index/memory.py is not named in it",
        "README.md:5, the map's entry plookup/index/: names corpus.py, which is not in plookup/index/",
        "README.md, the paragraph on `benchmarks/`: benchmarks/agents/ is not named in it",
        "README.md, the paragraph on `benchmarks/`: names stale/, which is not in benchmarks/",
    ], problems


def test_an_entry_out_of_shape_is_reported(tmp_path):
    (tmp_path / "plookup").mkdir()
    (tmp_path / "benchmarks").mkdir()
    readme = "```\nplookup/\n  index/     text\n   stray line\n     deep/  text\n```\n\n`benchmarks/`\n"
    problems = map_problems(readme, tmp_path)
    assert any("README.md:4: neither an entry" in p for p in problems), problems
    assert any("README.md:5: entry 'deep/' is not indented" in p for p in problems), problems
    assert any("the map's entry plookup/index/: plookup/index/ is not a package folder" in p
               for p in problems), problems
