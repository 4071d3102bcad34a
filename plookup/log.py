"""What plookup says while it starts, on the ``plookup`` logger: a line as each phase of a load
begins (loading the weights, the drafting kernels, measuring the verify-cost curve, probing
exactness), and one with its time when it ends, saying where a measurement is kept, so that a
slow first start can be told from a hang and the next start is known to be quick. A library user
sees them once they configure logging (INFO); the commands print them to stderr unless ``--quiet``
(llama-server's ``--log-disable``), as llama-server logs its loading.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from typing import Iterator

log = logging.getLogger("plookup")


@contextlib.contextmanager
def phase(what: str, detail: str = "") -> Iterator[None]:
    """`what` (a phase of a load, and its `detail`) as it begins, and its time as it ends."""
    log.info("%s%s ...", what, f" {detail}" if detail else "")
    start = time.perf_counter()
    yield
    log.info("%s: done in %.1f s", what, time.perf_counter() - start)


def to_stderr(quiet: bool = False) -> None:
    """The commands' setting: the phases on stderr as ``plookup: ...`` lines (none when `quiet`)."""
    if quiet:
        log.setLevel(logging.WARNING)
        return
    if not any(getattr(h, "plookup_stderr", False) for h in log.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("plookup: %(message)s"))
        handler.plookup_stderr = True
        log.addHandler(handler)
    log.setLevel(logging.INFO)
