"""The wheel: the project's own metadata builds without a deprecation warning (setuptools stops
building a license given as a TOML table after 2027-02-18: `make install` would then fail), and it
holds the package alone: none of the checkout's benchmarks/ harness (the editors' sessions,
llama-server's runner, the agent replay), which drives servers over HTTP and runs from a checkout.

Built from a copy of the sources, not in place: an in-place build packs whatever an earlier build
left in build/lib, modules since moved or deleted included."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "plookup", "benchmarks")
# Modules of the harness, by the names they had in the package and have in benchmarks/.
HARNESS = ("editor.py", "typing.py", "llama_server.py", "llama_vim.py", "llama_vim_session.py")


@pytest.mark.budget(120)
def test_the_wheel_builds_without_a_warning_and_holds_no_harness(tmp_path):
    source = tmp_path / "src"
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            source.mkdir(exist_ok=True)
            shutil.copy(path, source / name)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", str(source), "-w", str(tmp_path)],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-2000:]
    log = built.stdout + built.stderr
    assert "BuildBackendWarning" not in log and "deprecated" not in log.lower(), log[-3000:]
    (wheel,) = tmp_path.glob("plookup-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.endswith(".dist-info/METADATA") for n in names)
    assert "plookup/app/bench/command.py" in names and "plookup/app/bench/local_server.py" in names
    assert not [n for n in names if not n.startswith(("plookup/", "plookup-"))], names
    assert not [n for n in names if n.startswith("plookup/app/bench/") and n.rpartition("/")[2] in HARNESS]
