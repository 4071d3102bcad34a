"""Measure once, keep as JSON on disk: what depends only on the model, its settings and the build
(the verify-cost curve, the exactness verdicts, the doctor's report) is measured once per machine
and read back from ``cache_dir()/<folder>/<key>.json`` after that.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import warnings
from pathlib import Path
from typing import Iterator, Optional

from ..files import cache_dir, held, write_text_atomically
from ..log import log, phase


# Inside cached_only(): what is not cached yet raises NotMeasured instead of being measured now.
_cached_only = contextvars.ContextVar("plookup_cached_only", default=False)


class NotMeasured(LookupError):
    """A measurement :func:`measured_once` would have made now, inside :func:`cached_only`."""

    def __init__(self, what: str, path):
        super().__init__(f"the {what} is not measured yet ({path})")
        self.what, self.path = what, path


@contextlib.contextmanager
def cached_only() -> Iterator[None]:
    """Inside the block, :func:`measured_once` reads what is cached and measures nothing: a
    missing measurement raises :class:`NotMeasured` (``plookup.Llama(calibration="background")``)."""
    token = _cached_only.set(True)
    try:
        yield
    finally:
        _cached_only.reset(token)


def digest(parts) -> str:
    """A short key for a measurement that depends on `parts` (JSON-serializable)."""
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


def cache_path(folder: str, key: str) -> Path:
    return cache_dir() / folder / f"{key}.json"


def read_cached(path, parse=lambda data: data, what: Optional[str] = None):
    """``parse`` of the JSON kept at `path`; None when there is none yet, or when it cannot be read,
    which is reported where `what` names it (it is then measured again and replaced)."""
    try:
        return parse(json.loads(Path(path).read_text()))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as e:
        if what is not None:
            warnings.warn(f"plookup: ignoring the unreadable {what} {path} ({e}); measuring it again")
        return None


def keep(path, data, indent: Optional[int] = None) -> None:
    """`data` kept at `path` as JSON, written whole or not at all."""
    write_text_atomically(path, json.dumps(data, indent=indent))


def measured_once(path, what: str, parse, measure, serialize):
    """``parse`` of the JSON kept at `path`, else ``measure()`` now, kept there as ``serialize``
    of it (inside :func:`cached_only`: else :class:`NotMeasured`)."""
    cached = read_cached(path, parse, what)
    if cached is not None:
        log.info("%s: read from %s", what, path)
        return cached
    if _cached_only.get():
        raise NotMeasured(what, path)
    # One process measures a figure at a time: another that needs it too (two servers started at
    # once on the same settings, two test workers) waits, then reads it instead of measuring it
    # again on a machine the first one keeps busy.
    with held(path):
        cached = read_cached(path, parse)  # (an unreadable file was reported above)
        if cached is not None:
            log.info("%s: read from %s, measured meanwhile by another process", what, path)
            return cached
        with phase(f"measuring the {what}", f"(once for this model, settings and build; kept in {path})"):
            value = measure()
        keep(path, serialize(value))
    return value
