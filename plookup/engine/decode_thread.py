"""A model's decodes on one thread of their own, where its consumers run on several.

llama.cpp's CPU backend built with OpenMP (llama-cpp-python's default on Linux; ``OPENMP = 1`` in
``llama_print_system_info``) keeps a team of worker threads for each thread that calls it, and an
idle team's workers go on spinning long after its last decode, taking turns on the cores with the
team that decodes: a decode from a second thread is several times slower, so every decode runs on
one thread, from the model's load on (later hand-overs do not help: the loading thread's team has
spun by then). `plookup serve` runs each request, and each chunk of a stream, on a thread of its
pool, so it asks for one too. A hand-over costs far less than that, but still something, so a
model driven from one thread keeps decoding on it. The figures: docs/lab/notebook.md, "Figures behind the
code's choices".
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import llama_cpp


def teams_per_thread() -> bool:
    """Whether this llama.cpp's CPU backend keeps a worker team per calling thread (OpenMP)."""
    return "OPENMP = 1" in llama_cpp.llama_print_system_info().decode()


class DecodeThread:
    """One thread that runs the decodes handed to it, in order."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="plookup-decode")

    def route(self, decode: Callable) -> Callable:
        """`decode(batch)` on this thread; its result or error returned to the caller."""

        def on_the_decode_thread(batch):
            return self._pool.submit(decode, batch).result()

        return on_the_decode_thread

    def close(self) -> None:
        self._pool.shutdown(wait=True)
