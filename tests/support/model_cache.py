"""A model cache of the test's own, and a pip that must not run."""

from __future__ import annotations

import pytest


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PLOOKUP_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def no_pip(args):
    raise AssertionError(f"pip was run: {args}")
