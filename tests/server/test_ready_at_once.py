"""A first `plookup serve` on a model and settings it has never measured answers at once (issue 47,
"Ready at once"): /health and a first completion within seconds of the weights being loaded, that
completion plain decoding's text with no drafts, while the exactness probe and the verify-cost
curve are measured in a process of its own (plookup.api.background); the log then says when
the measured figures take over, and from then on the server drafts, from the cache files that a
blocking start would have written."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

import llama_cpp
import pytest

from plookup.api.background import DEADLINE_ENV
from plookup.app.bench.local_server import free_port
from conftest import MEASURED_QUICKLY
from support.plain import NEAR_TIE, first_near_tie, greedy_with_gaps
from support.threads import THREADS

READY_S = 5.0  # the bound, from the weights loaded to a first completion answered
TAKE_OVER_S = 600.0  # the background measurement's own deadline (plookup.api.background)
LOADED = re.compile(r"plookup: loading SmolLM2-135M-Instruct\.Q4_1\.gguf: done in ")
TAKEN_OVER = re.compile(r"plookup: measured figures take over [\d.]+ s after the start .*drafts of up to (\d+) tokens")
# copied line for line: drafted whole once drafting is on
REPEATED = "a = 1\nb = 2\nc = 3\n" * 4 + "a = 1\n"
N_CTX = 2048
# greedy (unpenalised, as every request that names no penalty): plain decoding's tokens
GREEDY = {"max_tokens": 24, "temperature": 0, "repeat_penalty": 1.0}


def post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as r:
        return json.loads(r.read())


def get(url: str) -> tuple[int, dict]:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.status, json.loads(r.read())


class Log:
    """The server's stderr, kept in a file (a pipe nobody reads would block it)."""

    def __init__(self):
        self.file = tempfile.TemporaryFile("w+")

    def text(self) -> str:
        self.file.seek(0)
        return self.file.read()

    def wait_for(self, pattern: re.Pattern, seconds: float, server: subprocess.Popen) -> re.Match:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            found = pattern.search(self.text())
            if found:
                return found
            assert server.poll() is None, f"plookup serve exited with {server.returncode}:\n{self.text()}"
            time.sleep(0.05)
        raise AssertionError(f"no line matching {pattern.pattern!r} within {seconds} s:\n{self.text()}")


@pytest.fixture(scope="module")
def plain(model_path):
    """Plain llama_cpp decoding under the server's settings (-fa auto: on, on the CPU)."""
    return llama_cpp.Llama(model_path["smollm2"], n_ctx=N_CTX, n_threads=THREADS, n_threads_batch=THREADS,
                           n_batch=2048, flash_attn=True, verbose=False)


@pytest.fixture(scope="module")
def repeated(plain) -> tuple[list[int], str]:
    """REPEATED's tokens, and plain greedy decoding's text of them up to its first near-tie: decoded
    once, before a test's server starts, so that nothing of the tests' own shares the cores with a
    background measurement (whose curve is measured again where its timings move)."""
    prompt = plain.tokenize(REPEATED.encode(), add_bos=True, special=True)
    reference, gaps = greedy_with_gaps(plain, prompt, 24, NEAR_TIE["smollm2"])
    tie = first_near_tie(gaps, NEAR_TIE["smollm2"])
    assert tie >= 8, f"only {tie} tokens before the first near-tie"
    return prompt, plain.detokenize(reference[:tie]).decode()


@contextlib.contextmanager
def first_start(cache, *options: str, deadline_s: str = ""):
    """`plookup serve` on SmolLM2 with `cache` as its cache (nothing measured yet), and the
    background measurement's deadline `deadline_s` (default: its own): yields (URL, process, Log)."""
    port = free_port()
    env = dict(os.environ, PLOOKUP_CACHE_DIR=str(cache))
    env.pop(DEADLINE_ENV, None)
    if deadline_s:
        env[DEADLINE_ENV] = deadline_s
    log = Log()
    server = subprocess.Popen([sys.executable, "-m", "plookup.app.cli", "serve", "-m", "smollm2", "--port", str(port),
                               "-a", "smol", "-c", str(N_CTX), "-t", str(THREADS), *options],
                              stdout=subprocess.DEVNULL, stderr=log.file, text=True, env=env)
    try:
        yield f"http://127.0.0.1:{port}", server, log
    finally:
        server.terminate()
        server.wait(timeout=30)


def health_once_loaded(url: str, server: subprocess.Popen, log: Log) -> tuple[float, dict]:
    """(when the weights were loaded, /health's first answer), which comes within READY_S of it."""
    log.wait_for(LOADED, 120, server)
    loaded = time.monotonic()
    while True:
        try:
            status, health = get(f"{url}/health")
            assert status == 200, health
            return loaded, health
        except OSError:
            assert time.monotonic() - loaded < READY_S, f"no /health within {READY_S} s of the load:\n{log.text()}"
            time.sleep(0.05)


@pytest.mark.budget(90)
def test_a_first_start_answers_at_once_plainly_then_drafts_once_measured(tmp_path, repeated):
    prompt, plains = repeated
    with first_start(tmp_path, *MEASURED_QUICKLY) as (url, server, log):
        loaded, health = health_once_loaded(url, server, log)
        assert health == {"status": "ok", "calibration": "measuring"}, health
        first = post(f"{url}/v1/completions", GREEDY | {"prompt": prompt})
        answered = time.monotonic() - loaded
        assert answered < READY_S, f"a first completion {answered:.1f} s after the load:\n{log.text()}"
        assert not TAKEN_OVER.search(log.text()), "measured before the first request: nothing was shown"

        # plain decoding's text, and not a draft in it
        assert first["choices"][0]["text"].startswith(plains), first
        assert first["usage"]["speculative"]["drafted"] == 0, first["usage"]

        taken = log.wait_for(TAKEN_OVER, TAKE_OVER_S, server)
        assert 0 < int(taken.group(1)) <= 8, taken.group(0)
        assert get(f"{url}/health") == (200, {"status": "ok"})
        again = post(f"{url}/v1/completions", GREEDY | {"prompt": prompt})
        assert again["usage"]["speculative"]["drafted"] > 0, again["usage"]
        assert again["choices"][0]["text"].startswith(plains), again
        # the files a blocking start writes, under the keys the server reads
        for folder in ("invariance", "cost-curves"):
            assert list((tmp_path / folder).glob("*.json")), f"nothing in {folder}: {log.text()}"
        assert "in the background: measuring the verify-cost curve" in log.text()
    assert not any(p for p in tmp_path.rglob("*.tmp")), "a measurement left half a file"


@pytest.mark.budget(30)
def test_a_measurement_past_its_deadline_gives_up_and_the_server_keeps_decoding_plainly(tmp_path, repeated):
    with first_start(tmp_path, deadline_s="1") as (url, server, log):
        log.wait_for(re.compile(r"plookup: the background measurement gave up after 1 s of running "
                                r"\(\$PLOOKUP_CALIBRATION_DEADLINE_S\): serving without drafts"), 60, server)
        assert get(f"{url}/health") == (200, {"status": "ok", "calibration": "not measured"})
        answer = post(f"{url}/v1/completions", GREEDY | {"prompt": repeated[0], "max_tokens": 16})
        assert answer["usage"]["speculative"]["drafted"] == 0, answer["usage"]
        assert not list(tmp_path.rglob("*.json")), "a measurement that gave up wrote its figures"


@pytest.mark.budget(30)
def test_calibration_none_drafts_at_once_by_the_built_in_curve_and_measures_nothing(tmp_path, repeated):
    """`--calibration none`, what the other server tests start with (conftest.serving): on a clean
    machine it drafts from the first request, sized by the built-in curve, and writes no figure."""
    prompt, plains = repeated
    with first_start(tmp_path, "--calibration", "none") as (url, server, log):
        assert health_once_loaded(url, server, log)[1] == {"status": "ok"}
        answer = post(f"{url}/v1/completions", GREEDY | {"prompt": prompt})
        speculative = answer["usage"]["speculative"]
        assert speculative["drafted"] > 0 and speculative["exact"] is None, answer["usage"]
        assert answer["choices"][0]["text"].startswith(plains), answer
        assert not list(tmp_path.rglob("*.json")), f"figures written:\n{log.text()}"
        assert "measur" not in log.text().replace("not measured", ""), log.text()
