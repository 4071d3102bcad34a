"""Where plookup keeps files (cost curves, doctor reports, fetched models) and how it writes them.

Everything lives under ``$PLOOKUP_CACHE_DIR`` (default ``~/.cache/plookup``). Files are written
whole or not at all: a temporary file with a unique name in the same folder, readable by its owner
only (a memory file holds users' text), then renamed over the target. Two processes writing the
same file at once each rename a complete file of their own; readers never see half of one.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path
from typing import IO, Callable, Iterator


def cache_dir() -> Path:
    return Path(os.environ.get("PLOOKUP_CACHE_DIR", Path.home() / ".cache" / "plookup"))


@contextlib.contextmanager
def replacing(path) -> Iterator[Path]:
    """A fresh owner-only (0600) temporary path beside `path`, renamed to `path` when the block
    ends without an exception and removed when it raises."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)  # mode 0600
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_atomically(path, write: Callable[[IO[bytes]], None]) -> None:
    """Call ``write(f)`` on a fresh owner-only file, then rename it to `path`."""
    with replacing(path) as tmp, open(tmp, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())


def write_text_atomically(path, text: str) -> None:
    write_atomically(path, lambda f: f.write(text.encode("utf-8")))


@contextlib.contextmanager
def held(path) -> Iterator[None]:
    """An exclusive lock named after `path` for the block, between processes and threads alike (each
    block opens its lock file anew; a lock dies with its process). The lock files live apart, in
    cache_dir()/locks, leaving the folders they guard as they were. Where the OS has no flock
    (Windows), the block runs unlocked."""
    try:
        import fcntl
    except ImportError:  # not POSIX
        yield
        return
    lock = cache_dir() / "locks" / (hashlib.sha256(str(Path(path).resolve()).encode()).hexdigest()[:16] + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
