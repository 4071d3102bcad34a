"""A small project tree for building corpora: code, text in two encodings, a binary, an ignored secret."""

from __future__ import annotations

import pytest


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "project"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "code.py").write_text("def add(a, b):\n    return a + b\n")
    (root / "pkg" / "latin.txt").write_bytes("caf\xe9 cr\xe8me\n".encode("latin-1"))
    (root / "pkg" / "broken.txt").write_bytes(b"ok \xff\xfe bytes\n")
    (root / "pkg" / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0" + bytes(range(256)))
    (root / "pkg" / "big.txt").write_text("x" * 5000)
    (root / "pkg" / "empty.txt").write_text("")
    (root / "pkg" / "copy.py").write_text("def add(a, b):\n    return a + b\n")
    (root / "secret.env").write_text("TOKEN=1\n")
    (root / ".gitignore").write_text("*.env\n")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    return root
