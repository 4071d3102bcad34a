"""`plookup serve`'s start says what it is doing (plookup.log): a line per phase, in order, before
/health answers, then the measurements made in the background (plookup.api.background), each
saying where it is kept, and when their figures take over; a second start reads them from there;
--quiet (llama-server's --log-disable) says none of it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

import pytest

from plookup.app.bench.local_server import free_port
from conftest import MEASURED_QUICKLY
from support.threads import THREADS

PHASES = [
    r"loading SmolLM2-135M-Instruct\.Q4_1\.gguf \.\.\.",
    r"layers: ",
    r"loading the drafting kernels .*\.\.\.",
    r"exactness .*: not measured yet for this model and settings: no drafts",
    r"ready: serving smol at http://127\.0\.0\.1:\d+",
    r"in the background: measuring the exactness .*kept in {cache}",
    r"in the background: measuring the verify-cost curve .*kept in {cache}",
    r"measured figures take over ",
]
TAKEN_OVER = re.compile(r"plookup: measured figures take over ")


def start(cache: str, *options: str, taken_over: bool = False) -> list[str]:
    """The stderr lines of `plookup serve` from its start until /health answers (`taken_over`: and
    its measured figures took over); then it is stopped."""
    port = free_port()
    log = tempfile.TemporaryFile("w+")
    env = dict(os.environ, PLOOKUP_CACHE_DIR=cache)
    server = subprocess.Popen([sys.executable, "-m", "plookup.app.cli", "serve", "-m", "smollm2", "--port", str(port),
                               "-a", "smol", "-c", "1024", "-t", str(THREADS), *MEASURED_QUICKLY, *options],
                              stdout=subprocess.DEVNULL, stderr=log, text=True, env=env)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5)
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, "plookup serve did not start"
                time.sleep(0.2)
        while taken_over:
            log.seek(0)
            if TAKEN_OVER.search(log.read()):
                break
            assert server.poll() is None and time.monotonic() < deadline + 480, "its figures did not take over"
            time.sleep(0.2)
        log.seek(0)
        return [line for line in log.read().splitlines() if line.startswith("plookup: ")]
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


@pytest.mark.budget(60)
def test_a_start_says_each_phase_in_order_and_a_second_start_reads_the_caches(tmp_path):
    cache = str(tmp_path)
    first = start(cache, taken_over=True)
    at = 0
    for phase in PHASES:  # each in order, the lines between them free
        pattern = re.compile("plookup: " + phase.format(cache=re.escape(cache)))
        found = next((i for i in range(at, len(first)) if pattern.match(first[i])), None)
        assert found is not None, f"no line matching {pattern.pattern!r} after line {at}:\n" + "\n".join(first)
        at = found + 1
    again = start(cache)
    assert any(re.match(rf"plookup: verify-cost curve: read from {re.escape(cache)}", line) for line in again), again
    assert not any("measuring" in line or "not measured" in line for line in again), again
    assert start(cache, "--log-disable") == []
