"""How fast this model decodes here: prompt and single-token speed, and host time per token with
greedy rows sampled on the host or on the backend (:mod:`plookup.verify.backend`), which
``plookup doctor`` reports and chooses by.
"""

from __future__ import annotations

import time

import numpy as np

from ..draft.values import PLAIN
from .clock import DecodeClock
from .costs import context_limit

# The doctor chooses backend sampling where it is this much faster on wall time: at the median
# of 2 rounds, one slow round once made two SmolLM2 settings read 17-22% faster on the backend.
BACKEND_MARGIN = 0.05


def backend_walls(measured: dict) -> tuple[float, float]:
    """(host, backend): wall ms per token of a doctor's backend-sampling measurement, its cases
    (no draft, drafting) summed: what its verdict weighs."""
    host, backend = (sum(case["ms_per_token"] for case in measured[name].values()) for name in ("host", "backend"))
    return host, backend


def measure_speeds(llm, prompt_tokens: int = 256, decodes: int = 32) -> tuple[float, float]:
    """Prompt processing and single-token decoding, tokens per second (medians of 3)."""
    prompt_tokens = min(prompt_tokens, context_limit(llm) - decodes - 1)
    tokens = np.random.default_rng(1).integers(100, llm.n_vocab(), prompt_tokens + decodes).tolist()
    prompt, decode = [], []
    for _ in range(3):
        llm.reset()
        start = time.perf_counter()
        llm.eval(tokens[:prompt_tokens])
        prompt.append(prompt_tokens / (time.perf_counter() - start))
        start = time.perf_counter()
        for token in tokens[prompt_tokens:]:
            llm.eval([token])
        decode.append(decodes / (time.perf_counter() - start))
    llm.reset()
    llm._requires_eval = True
    return float(np.median(prompt)), float(np.median(decode))


def measure_host(llm, tokens: int = 48) -> dict:
    """Host µs outside llama_decode per generated token and per decode, ms inside a decode, and
    wall ms per token: drafting nothing (random tokens), and drafting (a prompt that repeats)."""
    clock = DecodeClock(llm)
    random = np.random.default_rng(2).integers(100, llm.n_vocab(), 64).tolist()
    cases = {"no draft": (random, PLAIN), "drafting": (list(range(300, 340)) * 3, None)}
    out = {}
    try:
        for name, (prompt, speculative) in cases.items():
            llm.prefill(prompt, temp=0.0, repeat_penalty=1.0)  # not eval: see Llama.prefill
            clock.reset()
            start = time.perf_counter()
            with llm.request(speculative=speculative):
                for n, _ in enumerate(llm.generate(prompt, temp=0.0, repeat_penalty=1.0), 1):
                    if n >= tokens:
                        break
            wall = time.perf_counter() - start
            host = wall - clock.decode_seconds
            out[name] = dict(us_per_token=1e6 * host / tokens, us_per_decode=1e6 * host / clock.decodes,
                             decode_ms=1e3 * clock.decode_seconds / clock.decodes, ms_per_token=1e3 * wall / tokens)
    finally:
        llm.reset()
    return out


def measure_backend_sampling(llm, rounds: int = 3) -> dict:
    """:func:`measure_host` with greedy rows sampled on the host and on the backend
    (:mod:`plookup.verify.backend`), rounds interleaved, the fastest round of each (interference
    from the rest of the machine only ever adds time: one slow round in two made a median of 2
    say the backend was 22% faster). `pays`: the backend's wall time per token, both cases
    together, at least BACKEND_MARGIN below the host's."""
    own = llm.backend_sampling
    runs: dict[str, list] = {"host": [], "backend": []}
    try:
        for _ in range(rounds):
            for name, rows in runs.items():
                llm.backend_sampling = name == "backend"
                rows.append(measure_host(llm))
    finally:
        llm.backend_sampling = own
    out: dict = {
        name: {case: min((r[case] for r in rows), key=lambda m: m["ms_per_token"]) for case in rows[0]}
        for name, rows in runs.items()
    }
    host, backend = backend_walls(out)
    out["pays"] = bool(backend < (1 - BACKEND_MARGIN) * host)
    return out
