"""Workloads from real changes nobody here wrote: files of two consecutive releases of PyPI packages.

An editor's "apply" request sends a file and the change to make, and the model answers with the
whole new file: the answer is long (hundreds to thousands of tokens) and mostly a copy, with edit
sites where it is not. Each workload here is one Python file that changed between two released
versions of a pure-Python package: the prompt is the old file and the unified diff between the
versions, the expected answer the new file. The wheels are downloaded with pip on first use and
kept in ``cache_dir()/bench-releases`` (a few hundred KB each); nothing of them is imported.

A small model (Qwen2.5-Coder-0.5B) mostly copies the old file instead of applying the diff: for
a decoder that is still the copy-heavy long answer editors wait for; a model that edits
(Qwen2.5-Coder-1.5B) shows what the edit sites cost too.
"""

from __future__ import annotations

import difflib
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ...files import cache_dir
from .workloads import Workload

# (package, old version, new version): consecutive releases with py3-none-any wheels.
RELEASES = (
    ("httpx", "0.27.0", "0.27.2"),
    ("attrs", "24.2.0", "24.3.0"),
    ("click", "8.1.7", "8.1.8"),
    ("requests", "2.32.2", "2.32.3"),
)
# A file is taken when it is this long (characters; about 3.5 a token for Python), so that its
# answer is long and the prompt (file and diff) and the answer fit a 4096-token context together,
# and when the diff changes a few lines, not most of it.
MIN_CHARS, MAX_CHARS = 1800, 6500
MAX_CHANGED_LINES = 40
APPLY_SYSTEM = "You apply diffs to files. Reply with the complete updated file only, in one code block."


@dataclass(frozen=True)
class FileChange:
    package: str
    old_version: str
    new_version: str
    path: str
    old: str
    new: str
    diff: str

    @property
    def changed_lines(self) -> int:
        return sum(1 for line in self.diff.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---"))


def wheel(package: str, version: str) -> Path:
    """The package's py3-none-any wheel, downloaded once."""
    folder = cache_dir() / "bench-releases"
    found = sorted(folder.glob(f"{package}-{version}-py3-none-any.whl"))
    if found:
        return found[0]
    folder.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
               f"{package}=={version}", "-d", str(folder)]
    result = subprocess.run(command, capture_output=True, text=True)
    found = sorted(folder.glob(f"{package}-{version}-py3-none-any.whl"))
    if result.returncode != 0 or not found:
        raise RuntimeError(f"could not download {package}=={version} with pip: {result.stderr.strip()[-500:]}")
    return found[0]


def python_files(path: Path) -> dict[str, str]:
    with zipfile.ZipFile(path) as archive:
        return {name: archive.read(name).decode("utf-8") for name in archive.namelist() if name.endswith(".py")}


def changes(package: str, old_version: str, new_version: str) -> list[FileChange]:
    """Every Python file of the package that changed between the two versions, by path."""
    old, new = python_files(wheel(package, old_version)), python_files(wheel(package, new_version))
    found = []
    for path in sorted(set(old) & set(new)):
        if old[path] != new[path]:
            diff = "".join(difflib.unified_diff(old[path].splitlines(True), new[path].splitlines(True),
                                                f"a/{path}", f"b/{path}"))
            found.append(FileChange(package, old_version, new_version, path, old[path], new[path], diff))
    return found


def apply_prompt(change: FileChange) -> list[dict]:
    task = f"Apply this diff to `{change.path}`.\n\n```python\n{change.old}```\n\n```diff\n{change.diff}```"
    return [{"role": "system", "content": APPLY_SYSTEM}, {"role": "user", "content": task}]


def apply_workloads(count: int, releases=RELEASES) -> list[Workload]:
    """Up to `count` apply requests, taken in turn from each release pair (files in path order,
    within the size and change bounds): kind "apply"."""
    per_release = []
    for package, old_version, new_version in releases:
        fit = [c for c in changes(package, old_version, new_version)
               if MIN_CHARS <= len(c.old) <= MAX_CHARS and 0 < c.changed_lines <= MAX_CHANGED_LINES]
        per_release.append(fit)
    picked = []
    for round_ in range(max((len(f) for f in per_release), default=0)):
        picked += [f[round_] for f in per_release if round_ < len(f)]
    return [Workload(f"apply:{c.package}-{c.old_version}..{c.new_version}:{c.path}", "apply", apply_prompt(c))
            for c in picked[:count]]
