"""Plain text for the commands' reports (bench, doctor): tables, and progress notes on stderr."""

from __future__ import annotations

import sys
from typing import Callable, Sequence


def notes(command: str) -> Callable[[str], None]:
    """A note for each step of `plookup COMMAND`, on stderr (stdout keeps the report)."""
    return lambda message: print(f"plookup {command}: {message}", file=sys.stderr, flush=True)


def grid(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(c)) for c in column) for column in zip(header, *rows)]
    line = lambda cells: "  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])
