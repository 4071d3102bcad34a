"""A model's decodes on one thread of their own, where its consumers run on several.

llama.cpp's CPU backend built with OpenMP (llama-cpp-python's default on Linux; ``OPENMP = 1`` in
``llama_print_system_info``) keeps a team of worker threads for each thread that calls it, and an
idle team's workers go on spinning long after its last decode, taking turns on the cores with the
team that decodes. Measured on this repository's 2-core machine (Qwen2.5-Coder-0.5B Q8_0,
n_threads 2): a one-row decode that takes 28 ms from the thread that always decodes took 75-95 ms
from a second thread after the first had decoded; the engine, which steps on whichever consumer's
thread finds the context free, made a 4-slot step of 4 rows 91-97 ms, and 70-75 ms with every
decode on one thread from the model's load on (later hand-overs do not help: the loading thread's
team had spun for seconds). `plookup serve` runs each request, and each chunk of a stream, on a
thread of its pool, so it asks for one too.

A hand-over costs about 80-100 µs a decode here, so a model driven from one thread keeps
decoding on it.
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
