"""The project's own metadata builds without a deprecation warning: setuptools stops building a
license given as a TOML table after 2027-02-18 (`make install` would then fail)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.budget(120)
def test_the_wheel_builds_without_a_warning_about_the_projects_metadata(tmp_path):
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", str(ROOT), "-w", str(tmp_path)],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-2000:]
    log = built.stdout + built.stderr
    assert "BuildBackendWarning" not in log and "deprecated" not in log.lower(), log[-3000:]
    (wheel,) = tmp_path.glob("plookup-*.whl")
    metadata = subprocess.run([sys.executable, "-m", "zipfile", "-l", str(wheel)], capture_output=True, text=True)
    assert "METADATA" in metadata.stdout
