"""Which files a corpus holds: files, folders and globs, less binaries, what .gitignore excludes,
files over a size limit, and unreadable ones; and their text.

- A folder is walked in sorted order. ``.git`` folders are never entered, and the ``.gitignore``
  files met on the way (the folder's own and those below it) exclude what git would: blank lines
  and ``#`` comments ignored, ``!`` re-includes, a trailing ``/`` matches folders only, a pattern
  with a ``/`` before its end is anchored at its .gitignore's folder (else it matches a name at
  any depth), ``*`` ``?`` ``[...]`` within a name and ``**`` across folders; the last matching
  line wins, a deeper .gitignore over a higher one, and an excluded folder is not entered (so
  nothing under it can be re-included). The .gitignore files of folders above the one given, and
  git's other exclude files, are not read: a folder given is indexed as asked.
- A file given by name (or matched by a glob) is taken whatever .gitignore says.
- Binary: a NUL byte in the first 8 KiB. Text is UTF-8 (a BOM dropped); bytes that are not (a
  latin-1 file, say) become U+FFFD, and the file is counted as ``replaced``.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import re
from pathlib import Path
from typing import Iterable, Iterator, Optional

DEFAULT_MAX_FILE_BYTES = 1 << 20
SNIFF_BYTES = 8192
SKIP_REASONS = ("binary", "ignored", "too large", "unreadable")


@dataclasses.dataclass
class Collected:
    """The files to index, in order, and what was left out, by reason."""

    files: list[Path] = dataclasses.field(default_factory=list)
    skipped: dict[str, list[Path]] = dataclasses.field(default_factory=lambda: {r: [] for r in SKIP_REASONS})


def _regex(pattern: str) -> str:
    """A gitignore glob (without `!`, trailing `/` and leading `/`) as a regex over a
    '/'-separated path relative to its .gitignore's folder."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("/**", i) and i + 3 == len(pattern):
            out.append("/.*")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and "]" in pattern[i + 2 :]:
            close = pattern.index("]", i + 2)
            body = pattern[i + 1 : close]
            if body[0] in "!^":
                body = "^" + body[1:]
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = close + 1
        elif pattern[i] == "\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return "".join(out)


@dataclasses.dataclass(frozen=True)
class Rule:
    regex: re.Pattern
    negated: bool
    folders_only: bool
    anchored: bool  # matched against the whole relative path, else against the name


def parse_gitignore(text: str) -> list[Rule]:
    rules = []
    for line in text.splitlines():
        line = line.rstrip("\r")
        if not line.endswith("\\ "):
            line = line.rstrip(" ")
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        if negated or line.startswith("\\!") or line.startswith("\\#"):
            line = line[1:]
        folders_only = line.endswith("/")
        line = line.rstrip("/")
        if not line:
            continue
        anchored = "/" in line
        rules.append(Rule(re.compile(_regex(line.lstrip("/")) + r"\Z"), negated, folders_only, anchored))
    return rules


class Ignores:
    """The .gitignore rules in force in one folder: (folder, rules) pairs, outermost first."""

    def __init__(self, layers: tuple[tuple[Path, list[Rule]], ...] = ()):
        self.layers = layers

    def entering(self, folder: Path) -> "Ignores":
        """The rules in force inside `folder` (its own .gitignore added, when it has one)."""
        try:
            text = (folder / ".gitignore").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return self
        rules = parse_gitignore(text)
        return Ignores(self.layers + ((folder, rules),)) if rules else self

    def ignored(self, path: Path, is_folder: bool) -> bool:
        verdict = False
        for base, rules in self.layers:
            relative = path.relative_to(base).as_posix()
            for rule in rules:
                if rule.folders_only and not is_folder:
                    continue
                subject = relative if rule.anchored else path.name
                if rule.regex.match(subject):
                    verdict = not rule.negated
        return verdict


def _walk(folder: Path, ignores: Ignores, out: Collected, inside: frozenset = frozenset()) -> Iterator[Path]:
    real = os.path.realpath(folder)
    if real in inside:  # a link back to a folder being walked
        return
    inside = inside | {real}
    ignores = ignores.entering(folder)
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        out.skipped["unreadable"].append(folder)
        return
    for entry in entries:
        path = Path(entry.path)
        is_folder = entry.is_dir()  # follows links, as git does not; a linked folder is walked
        if is_folder and entry.name == ".git":
            continue
        if ignores.ignored(path, is_folder):
            out.skipped["ignored"].append(path)
        elif is_folder:
            yield from _walk(path, ignores, out, inside)
        elif entry.is_file():
            yield path


def _expand(spec) -> list[Path]:
    text = str(spec)
    if os.path.exists(text) or not glob.has_magic(text):
        if not os.path.exists(text):
            raise FileNotFoundError(f"{text}: no such file or folder")
        return [Path(text)]
    matches = sorted(glob.glob(text, recursive=True))
    if not matches:
        raise FileNotFoundError(f"{text}: no file matches")
    return [Path(m) for m in matches]


def collect(paths: Iterable, max_file_bytes: int = DEFAULT_MAX_FILE_BYTES) -> Collected:
    """The files under `paths` (files, folders, globs) to index, each once, and the rest by reason
    (binaries are found when read, by :func:`read_text`)."""
    out, seen = Collected(), set()
    candidates: list[Path] = []
    for spec in paths:
        for path in _expand(spec):
            candidates.extend(_walk(path, Ignores(), out) if path.is_dir() else [path])
    for path in candidates:
        key = os.path.realpath(path)
        if key in seen:
            continue
        seen.add(key)
        try:
            size = path.stat().st_size
        except OSError:
            out.skipped["unreadable"].append(path)
            continue
        if size > max_file_bytes:
            out.skipped["too large"].append(path)
        else:
            out.files.append(path)
    return out


def read_text(path: Path) -> tuple[Optional[str], bool]:
    """(text, replaced) of a file: None when it is binary (a NUL byte in its first 8 KiB);
    `replaced` when bytes that are not UTF-8 became U+FFFD. OSError when unreadable."""
    data = path.read_bytes()
    if b"\0" in data[:SNIFF_BYTES]:
        return None, False
    try:
        return data.decode("utf-8-sig"), False
    except UnicodeDecodeError:
        return data.decode("utf-8-sig", errors="replace"), True
