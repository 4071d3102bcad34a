"""The threads a test's models use, and generations run from threads of their own."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

# Every model a test process loads, in process or in a server it starts, decodes on THREADS threads
# (the same for single-token and batched decoding). Alone, a process takes two cores; under
# pytest-xdist (`make test` runs two workers) the cores are shared out, one each on a 2-core machine:
# llama.cpp's threads wait for each other at every operation, and a model asking for more threads
# than it gets a core for runs far slower. Results do not depend on it: SmolLM2, Gemma 3 and the
# code model decode bitwise the same logits on 1 and 2 threads (portable build, measured 2026-12-07).
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
THREADS = max(1, min(2, (os.cpu_count() or 1) // WORKERS))


def run_concurrently(llm, prompts, generate):
    with ThreadPoolExecutor(max_workers=len(prompts)) as pool:
        return list(pool.map(generate, prompts))
