"""`plookup serve` started with llama-server's command line, as llama.cpp's and the editors' READMEs
write it, and its LLAMA_ARG_* variables: what each sets reaches the server (the parsing alone, every
spelling, preset and refusal: tests/unit/test_llama_cli.py)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import pytest

from plookup.app.bench.local_server import free_port

from conftest import CODER
from support.threads import THREADS

# llama.vim's README, the long form of its llama-server command (with the model plookup gets)
LLAMA_VIM = ["-ngl", "99", "-fa", "-ub", "1024", "-b", "1024", "-dt", "0.1", "--ctx-size", "0", "--cache-reuse", "256"]


@contextlib.contextmanager
def started(argv: list[str], env: dict[str, str], startup_s: float = 120):
    """`plookup serve ARGV --port P` with `env` added to this environment: yields (base URL, its log
    so far as a function)."""
    port = free_port()
    log = tempfile.TemporaryFile("w+")  # a pipe nobody reads would fill up and block the server
    server = subprocess.Popen([sys.executable, "-m", "plookup.app.cli", "serve", *argv, "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=log, text=True,
                              env={**os.environ, "LLAMA_ARG_THREADS": str(THREADS), **env})

    def tail() -> str:
        log.seek(0)
        return log.read()[-3000:]

    url, deadline = f"http://127.0.0.1:{port}", time.monotonic() + startup_s
    try:
        while True:
            try:
                urllib.request.urlopen(f"{url}/health", timeout=5)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"plookup serve did not start:\n{tail()}")
                time.sleep(0.3)
        yield url, tail
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


def call(url: str, path: str, body: dict | None = None, key: str | None = None) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    request = urllib.request.Request(url + path, json.dumps(body).encode() if body is not None else None, headers)
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def test_llama_servers_flags_and_variables_reach_the_server():
    env = {"LLAMA_ARG_ALIAS": "smol-env", "LLAMA_ARG_N_PREDICT": "5", "LLAMA_API_KEY": "k1,k2",
           "LLAMA_ARG_CTX_SIZE": "4096", "LLAMA_ARG_THREADS": str(THREADS)}  # -c below overrides the variable
    argv = ["-m", "smollm2", "-c", "512", "-np", "1", "-ngl", "0", "-b", "512", "-ub", "512"]
    with started(argv, env) as (url, log):
        assert call(url, "/v1/models")[0] == 401  # a key of $LLAMA_API_KEY is asked for
        status, models = call(url, "/v1/models", key="k2")
        assert status == 200 and [m["id"] for m in models["data"]] == ["smol-env"]
        status, props = call(url, "/props", key="k1")
        assert status == 200 and props["default_generation_settings"]["n_ctx"] == 512 and props["total_slots"] == 1
        # No max_tokens: the server's -n ($LLAMA_ARG_N_PREDICT) bounds the answer.
        status, answer = call(url, "/v1/completions", {"prompt": "1, 2, 3, 4,", "temperature": 0}, key="k1")
        assert status == 200 and answer["choices"][0]["text"] and answer["usage"]["completion_tokens"] == 5, log()


@pytest.mark.budget(60)  # 44 s on 2 cores where its cost curve at -b/-ub 1024 is measured first, then 3 s
def test_llama_vims_server_command(model_path):
    model_path[CODER]  # fetched before the server's clock starts
    with started(["-m", CODER, *LLAMA_VIM], {}, startup_s=600) as (url, log):
        assert "-dt: deprecated in llama.cpp" in log()
        status, props = call(url, "/props")
        assert status == 200 and props["default_generation_settings"]["n_ctx"] == 32768  # -c 0: Qwen's n_ctx_train
        status, answer = call(url, "/infill", {"input_prefix": "def add(a, b):\n    return ", "input_suffix": "\n",
                                               "n_predict": 4, "temperature": 0})
        assert status == 200 and "content" in answer, log()


def test_the_memory_file_is_written_when_the_server_is_stopped(tmp_path):
    """--memory PATH keeps what was served across a restart: stopped by SIGTERM (started() ends
    with one), the server writes it in its shutdown, which uvicorn runs before raising the signal
    again (anything after its run() never runs then)."""
    from plookup.index.memory import GlobalMemory

    path = tmp_path / "memory.npz"
    with started(["-m", "smollm2", "-c", "512", "--memory", str(path)], {}) as (url, log):
        status, answer = call(url, "/v1/completions", {"prompt": "1, 2, 3, 4,", "max_tokens": 6, "temperature": 0})
        assert status == 200 and not path.exists()
    usage = answer["usage"]
    memory = GlobalMemory.load(path)
    assert memory.documents == 1 and len(memory) == usage["prompt_tokens"] + usage["completion_tokens"]
