"""This machine's verify-cost curve: measured, cached on disk, and the ceiling it puts on any drafter.

``cost[n - 1]`` is the time of one ``llama_decode`` of n tokens, with logits at every position as a
verify step needs them, divided by the time of a one-token decode. A verify step of n tokens (the
pending token plus n - 1 draft tokens) that is entirely right yields n tokens: n - 1 accepted plus
the model's own next token. So an oracle drafter that always proposes n - 1 right tokens makes
``n / cost[n - 1]`` tokens per single-token decode, and the best n is the ceiling for any drafter.

Measuring takes a few seconds (every size up to 17 tokens and a few larger ones, several repeats);
the curve depends on the model, the thread counts and the batch settings, not on the prompt, so
:func:`cached_cost_curve` keeps it in ``cache_dir()/cost-curves`` under a key made of those
(:mod:`plookup.measure.cache`).
"""

from __future__ import annotations

import os
import time
import warnings
from typing import Optional

import llama_cpp
import numpy as np

from ..draft.index_drafter import DEFAULT_MAX_DRAFT
from ..draft.policy import validate_cost_curve
from ..verify.rows import fill, sequence_rows
from .cache import cache_path, digest, measured_once

# A single stream's largest verify step: the pending token and the longest draft.
DEFAULT_MAX_N = DEFAULT_MAX_DRAFT + 1
DEFAULT_REPEATS = 7
# Every size up to DENSE_N is timed (short drafts are the common case, and their costs differ
# most); above it sizes are timed this far apart, and the curve between them interpolated linearly.
DENSE_N = 17
SPARSE_STEPS = ((64, 8), (256, 32), (1 << 30, 64))  # (up to, step)
# Several slots verify up to parallel * (max_draft + 1) rows; past this many the curve is not
# measured but extrapolated (plookup.native.draft_length.batch_cost): on every backend measured a
# decode's cost is linear in its rows well before it, and timing 512-row decodes takes minutes.
MAX_MEASURED_ROWS = 256
# Decodes are timed behind a context of this many tokens: a verify step never runs on an empty
# cache, and attention over a few hundred cached tokens is part of what it costs.
CONTEXT_TOKENS = 256


# A curve whose first and second halves of rounds differ by more than this at the median size up
# to DENSE_N (one size's spread is noise: with a 135M model the halves of an idle machine's
# curve differed by over 15 % at some size in most measurements) was measured while the
# machine's speed moved (another process on its cores): it is measured again, up to MAX_PASSES
# times. Seen: a Qwen 0.5B Q8_0 curve cached on a busy 2-core machine read
# 1, 3.44, 5.27, 2.34 for 1-4 rows and 12.4 at 64, where on the idle machine they cost 1, 2.58,
# 3.52, 3.02 and 19.5, and every several-slot sizing drafted too much on it.
STEADY_TOLERANCE = 0.10
MAX_PASSES = 3
# Fewer rounds than this are not split in halves (a quick curve: tests, --quick).
MIN_SPLIT_ROUNDS = 4

# Plain decoding runs one-token decodes back to back, and a GPU backend replays its captured graph
# only while the batch shape repeats (llama.cpp's CUDA graphs): the first decode of a run of
# one-token decodes pays for the capture, the next ones are what plain decoding costs.
SINGLE_RUN = 4
# Part of the cache key: a change in how the curve is measured measures cached curves again.
METHOD = "synchronized; one-token decodes in runs; sparse sizes 8/32/64 apart; again until halves agree (median)"


def context_limit(llm: llama_cpp.Llama) -> int:
    """The tokens `llm`'s context holds: llama.cpp may round n_ctx up, while llama_cpp sizes
    input_ids by the n_ctx asked for."""
    return min(llm.n_ctx(), len(llm.input_ids))


# Times this process was resumed after a stop (SIGCONT): a measurement in the background
# (plookup.api.background) is stopped while the server it measures for generates, and a decode
# the stop fell in is timed again. Counted by resumed(), which that process installs as the handler.
_resumes = 0
RETIMES = 3  # a decode timed again at most this many times


def resumed(*_signal) -> None:
    global _resumes
    _resumes += 1


def _decode_seconds(llm: llama_cpp.Llama, tokens: list[int], n_past: int) -> float:
    for _ in range(RETIMES):
        before = _resumes
        fill(llm._batch.batch, sequence_rows(tokens, n_past))
        start = time.perf_counter()
        llm._ctx.decode(llm._batch)
        # Asynchronous backends (CUDA, Metal) return from llama_decode before the batch has run; a
        # step costs until its logits can be read.
        llama_cpp.llama_synchronize(llm._ctx.ctx)
        seconds = time.perf_counter() - start
        llm._ctx.kv_cache_seq_rm(-1, n_past, -1)
        if _resumes == before:
            break
    return seconds


def measure_cost_curve(
    llm: llama_cpp.Llama, max_n: int = DEFAULT_MAX_N, repeats: int = DEFAULT_REPEATS
) -> np.ndarray:
    """cost[n - 1] = median time of an n-token decode / median time of a 1-token decode, n = 1..max_n.

    The sizes of :func:`curve_sizes` are timed, linear in between. Shorter when n_batch or n_ctx is
    below max_n. A pass whose two halves of rounds disagree (:func:`steady`) is measured again; when
    MAX_PASSES all disagree, their median is the curve, with a warning. Leaves `llm` reset (its
    cache no longer matches any prompt).
    """
    vocab = llm.n_vocab()
    # A small context (n_ctx, and with it n_batch) bounds both the batch and the context behind it.
    limit = context_limit(llm)
    max_n = max(1, min(max_n, llm.n_batch, limit))
    n_context = max(0, min(CONTEXT_TOKENS, limit - max_n))
    rng = np.random.default_rng(0)
    context = rng.integers(100, vocab, max(n_context, max_n)).tolist()
    llm.reset()
    llm.eval(context[:n_context])
    n_past = llm.n_tokens
    sizes = curve_sizes(max_n)
    _decode_seconds(llm, context[:max_n], n_past)  # warm-up: first use of the largest graph
    curves = []
    for _ in range(MAX_PASSES):
        curve, halves = _timed_pass(llm, context, n_past, sizes, repeats)
        curves.append(curve)
        if halves is None or steady(*halves):
            break
    else:
        warnings.warn(f"the machine's speed moved while the verify-cost curve was measured ({MAX_PASSES} "
                      "passes disagreed): drafts are sized by their median; measure again on an idle machine "
                      "(plookup doctor)", RuntimeWarning, stacklevel=2)
        curve = np.median(curves, axis=0)
    llm.reset()
    llm._requires_eval = True
    return np.interp(np.arange(1, max_n + 1), sizes, curve)


def _timed_pass(llm, context: list[int], n_past: int, sizes: list[int], repeats: int):
    """(curve at `sizes`, its halves' curves at the dense sizes or None): `repeats` rounds of
    decodes, each a median over its rounds divided by the one-token decodes'."""
    rounds: list[dict[int, list[float]]] = []
    # Sizes interleaved within each round, so drift in machine load is shared by all of them;
    # verify steps change size from step to step as they do here, one-token decodes come in runs.
    for round_ in range(repeats):
        timed = {1: [_decode_seconds(llm, context[:1], n_past) for _ in range(SINGLE_RUN)][1:]}
        for n in sizes[1:]:
            # The large batches of several slots cost the most to time and vary least: fewer rounds.
            if n <= DENSE_N or round_ < max(2, repeats // 2):
                timed[n] = [_decode_seconds(llm, context[:n], n_past)]
        rounds.append(timed)

    def curve(of: list[dict[int, list[float]]], at: list[int]) -> np.ndarray:
        medians = np.array([np.median([t for r in of for t in r.get(n, [])]) for n in at])
        return medians / medians[0]

    if repeats < MIN_SPLIT_ROUNDS:
        return curve(rounds, sizes), None
    dense = [n for n in sizes if n <= DENSE_N]
    return curve(rounds, sizes), (curve(rounds[: repeats // 2], dense), curve(rounds[repeats // 2 :], dense))


def steady(first: np.ndarray, second: np.ndarray) -> bool:
    """Whether two curves of the same sizes agree within STEADY_TOLERANCE at their median size."""
    return bool(np.median(np.abs(first / second - 1.0)) <= STEADY_TOLERANCE)


def curve_sizes(max_n: int) -> list[int]:
    """The decode sizes timed for a curve up to max_n rows: all up to DENSE_N, then SPARSE_STEPS
    apart, and max_n."""
    sizes = set(range(1, min(max_n, DENSE_N) + 1))
    n = DENSE_N
    while n < max_n:
        step = next(step for limit, step in SPARSE_STEPS if n < limit)
        n = (n // step + 1) * step
        sizes.add(min(n, max_n))
    return sorted(sizes)


def oracle_speedup(cost: np.ndarray) -> tuple[int, float]:
    """(best n, speedup over plain decoding) of a drafter that is always right, on this curve."""
    n = np.arange(1, len(cost) + 1)
    rates = n / np.asarray(cost, dtype=float)
    best = int(np.argmax(rates))
    return best + 1, float(rates[best])


def curve_key(llm: llama_cpp.Llama, max_n: int = DEFAULT_MAX_N) -> str:
    """What a curve (and the exactness probe, keyed alike) depends on: the model file, the
    context's threads, batch and cache settings, the build, the sizes measured, and the RPC
    servers holding the layers, if any."""
    stat = os.stat(llm.model_path)
    params = llm.context_params
    settings = [
        METHOD, os.path.abspath(llm.model_path), stat.st_size, stat.st_mtime_ns,
        params.n_threads, params.n_threads_batch, params.n_batch, params.n_ubatch,
        int(params.flash_attn_type), params.type_k, params.type_v, llm.model_params.n_gpu_layers,
        llama_cpp.llama_print_system_info().decode(), max_n,
    ]
    rpc = getattr(llm, "rpc_devices", None)
    if rpc is not None:  # layers on RPC servers: each pass crosses the network (plookup.api.rpc)
        settings.append(["rpc", rpc.endpoints])
    return digest(settings)


def curve_rows(max_draft: int, parallel: int = 1) -> int:
    """The rows a verify step of drafts of up to `max_draft` tokens holds at most, which a model's
    curve is measured up to: a slot's draft and its pending token, times the slots (a step's
    throwaway rows beside several slots are priced by it too, plookup.draft.sizing), at most
    MAX_MEASURED_ROWS. Drafts longer than the model's bound are never made (a request's own bound
    only lowers it): timing larger steps would only make a first start measure longer (the time
    grows with the square of the rows)."""
    return min(parallel * (max_draft + 1), MAX_MEASURED_ROWS)


def cached_cost_curve(llm: llama_cpp.Llama, max_n: Optional[int] = None) -> np.ndarray:
    """The curve for `llm` up to max_n rows (default DEFAULT_MAX_N; at most MAX_MEASURED_ROWS,
    extrapolated beyond), from the cache or measured now (which resets `llm`'s context)."""
    max_n = min(max_n or DEFAULT_MAX_N, MAX_MEASURED_ROWS)
    return measured_once(
        cache_path("cost-curves", curve_key(llm, max_n)), "verify-cost curve",
        parse=lambda data: validate_cost_curve(data["cost"]),
        measure=lambda: measure_cost_curve(llm, max_n),
        serialize=lambda cost: {"model": llm.model_path, "cost": cost.tolist()},
    )
