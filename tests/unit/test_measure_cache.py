"""plookup.measure.cache: a figure measured once, kept, and measured by one process at a time."""

from __future__ import annotations

import threading
import time

from plookup.measure.cache import measured_once


def test_a_figure_needed_twice_at_once_is_measured_once(tmp_path, monkeypatch):
    """The second caller waits for the first's measurement and reads it (the lock is per opened
    file, so two threads contend as two processes do)."""
    monkeypatch.setenv("PLOOKUP_CACHE_DIR", str(tmp_path))
    path, calls, got = tmp_path / "curves" / "k.json", [], []
    started = threading.Event()

    def measure():
        calls.append(1)
        started.set()
        time.sleep(0.3)
        return [1.0, 2.0]

    def need():
        got.append(measured_once(path, "figure", list, measure, list))

    first = threading.Thread(target=need)
    first.start()
    started.wait(5)  # the first is measuring: the second comes while it does
    second = threading.Thread(target=need)
    second.start()
    first.join(), second.join()
    assert len(calls) == 1 and got == [[1.0, 2.0], [1.0, 2.0]]
    assert measured_once(path, "figure", list, measure, list) == [1.0, 2.0] and len(calls) == 1  # kept
    assert sorted(p.name for p in path.parent.iterdir()) == ["k.json"]  # its lock lives apart
