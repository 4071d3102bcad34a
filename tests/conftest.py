"""Real models for the tests: SmolLM2-135M (llama architecture, 49k vocab) and Gemma 3 270M
(262k vocab, sliding-window attention), each loaded once per session as a plain llama_cpp.Llama and
as a plookup.Llama with identical settings."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
import urllib.request

import llama_cpp
import pytest

import plookup

MODEL_PATHS = {"smollm2": plookup.smollm2_path, "gemma3": plookup.gemma3_path}
N_CTX = 2048
# Both objects get the same threads for single-token and batched decoding.
LLAMA_KWARGS = dict(n_ctx=N_CTX, n_threads=2, n_threads_batch=2, verbose=False, seed=1234)
# Gemma 3 270M's GGUF carries no chat template; llama_cpp's "gemma" format is its turn markup.
MODEL_KWARGS = {"smollm2": LLAMA_KWARGS, "gemma3": dict(LLAMA_KWARGS, chat_format="gemma")}


@pytest.fixture(scope="session")
def model_path():
    return {name: path() for name, path in MODEL_PATHS.items()}


@pytest.fixture(scope="session", params=list(MODEL_PATHS))
def model_pair(request, model_path):
    """(name, plain llama_cpp.Llama, plookup.Llama) for each model."""
    path, kwargs = model_path[request.param], MODEL_KWARGS[request.param]
    return request.param, llama_cpp.Llama(path, **kwargs), plookup.Llama(path, **kwargs)


@pytest.fixture(scope="session")
def smol(model_path):
    """A plookup.Llama on SmolLM2 for the tests that need one model only."""
    return plookup.Llama(model_path["smollm2"], **LLAMA_KWARGS)


def kv_positions(llm: llama_cpp.Llama) -> tuple[int, int]:
    """(lowest, highest) position held in the KV cache for sequence 0 ((-1, -1) when empty)."""
    memory = llama_cpp.llama_get_memory(llm.ctx)
    return llama_cpp.llama_memory_seq_pos_min(memory, 0), llama_cpp.llama_memory_seq_pos_max(memory, 0)


SERVER_STARTUP_SECONDS = 120


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serving(alias: str, *options: str):
    """`plookup serve` on SmolLM2 in a subprocess on 127.0.0.1: yields (base URL, process)."""
    port = free_port()
    command = [
        sys.executable, "-m", "plookup.cli", "serve", "--port", str(port), "--model-alias", alias,
        "--n-ctx", "2048", "--threads", "2", *options,
    ]  # fmt: skip
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + SERVER_STARTUP_SECONDS
    try:
        while True:
            try:
                urllib.request.urlopen(f"{url}/health", timeout=5)  # open even with --api-key
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    server.kill()
                    pytest.fail(f"plookup serve did not start:\n{server.communicate()[1][-3000:]}")
                time.sleep(0.3)
        yield url, server
    finally:
        server.terminate()
        server.communicate(timeout=30)
