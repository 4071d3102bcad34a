"""Is verification exact here? Batch invariance of this model, build and runtime settings, measured.

A verify batch is exact when the logits of each of its rows are bitwise equal to what single-token
decoding computes at that position. Then greedy speculative decoding gives plain decoding's text
token for token, and sampling draws from the very same distributions. llama.cpp promises no such
thing: for a batch, some kernels take other code paths that round differently (which, and the
settings that turn them off: :mod:`plookup.measure.settings`).

:func:`probe_invariance` measures it on a loaded model in plookup's own context (two sequences,
unified KV): rows of single-draft verify batches of the cost curve's sizes (every n = 2..17, then
sparser up to the longest draft plus one) and of two-branch ones of n = 4..16 tokens against
single-token decodes of the same tokens; :func:`probe_slots`, a slot's rows beside another's.
:func:`cached_invariance` keeps the verdict per model, build and settings
(:mod:`plookup.measure.cache`), as :mod:`plookup.measure.costs` keeps the cost curve.
``plookup doctor`` (:mod:`plookup.app.doctor`) measures every setting in a process of its own.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Optional

import llama_cpp
import llama_cpp._internals as internals
import numpy as np

from ..draft.values import Branch
from ..verify.greedy import logits_row
from ..verify.rows import decode_chunks, fill, sequence_rows, verify_rows
from .cache import cache_path, measured_once
from .costs import DEFAULT_MAX_N, context_limit, curve_key, curve_sizes
from .settings import tiled_from_environment

# Two-branch batches are probed up to this size: plookup verifies a second branch only where
# verification is not exact, so their rows are reported, never required.
BRANCH_MAX_N = 16
# Verification is called exact when every single-draft batch up to this many rows is (drafts of
# 16, the bound before drafts grew longer); drafts are then kept within the sizes found exact.
EXACT_MIN_ROWS = 17
CONTEXT_TOKENS = 256  # verify batches run behind a context; attention over it is part of the check
FORK_AT = 1  # the probe's two-branch batches part after pending + one shared draft token
LOCKSTEP = 32  # the slot probe's context tokens decoded a row of each sequence at a time


@dataclass
class RowCheck:
    n: int  # tokens in the verify batch
    two_branch: bool
    equal: int  # rows bitwise equal to single-token decoding
    rows: int
    max_delta: float  # max |logit difference| over the batch's rows


@dataclass
class Invariance:
    checks: list[RowCheck] = field(default_factory=list)

    @property
    def single_invariant(self) -> bool:
        """Single-draft verify batches are bitwise equal to single-token decoding."""
        singles = [c for c in self.checks if not c.two_branch]
        return bool(singles) and all(c.equal == c.rows for c in singles)

    @property
    def exact_rows(self) -> int:
        """The largest probed batch size n such that every single-draft batch of up to n rows
        was bitwise single-token decoding (1: not even the smallest)."""
        rows = 1
        for check in sorted((c for c in self.checks if not c.two_branch), key=lambda c: c.n):
            if check.equal != check.rows:
                break
            rows = check.n
        return rows

    def exact_within(self, max_rows: int) -> Optional[int]:
        """The largest verify batch (rows) that keeps verification exact for drafts of up to
        max_rows - 1 tokens: None where batches of EXACT_MIN_ROWS (or max_rows, if fewer) are not."""
        rows = self.exact_rows
        return min(rows, max_rows) if rows >= min(EXACT_MIN_ROWS, max_rows) else None

    def rows(self, two_branch: bool) -> tuple[int, int]:
        """(rows bitwise equal, rows) over the single-draft or the two-branch batches."""
        checks = [c for c in self.checks if c.two_branch == two_branch]
        return sum(c.equal for c in checks), sum(c.rows for c in checks)

    def summary(self) -> str:
        parts = []
        for name, branch in (("single", False), ("two-branch", True)):
            checks = [c for c in self.checks if c.two_branch == branch]
            worst = max((c.max_delta for c in checks), default=0.0)
            parts.append(f"{name} {sum(c.equal for c in checks)}/{sum(c.rows for c in checks)} rows"
                         + (f" (max |Δ| {worst:.2g})" if worst else ""))
        if not self.single_invariant:
            parts.append(f"single-draft batches exact up to {self.exact_rows} rows")
        return ", ".join(parts)


def _logits(llm, row: int) -> np.ndarray:
    """A copy of batch row `row`'s logits of the model (or of a decoder with the model's context)."""
    return logits_row(llm._ctx, row, llm.n_vocab()).copy()


def _single_decodes(llm, tokens, n_past: int) -> list[np.ndarray]:
    """Logits after each of `tokens`, decoded one at a time from n_past on; the cache is left
    holding only the first n_past positions again."""
    out = []
    for i, token in enumerate(tokens):
        fill(llm._batch.batch, sequence_rows([token], n_past + i))
        llm._ctx.decode(llm._batch)
        out.append(_logits(llm, 0))
    llm._ctx.kv_cache_seq_rm(-1, n_past, -1)
    return out


def _compare(batch_rows: list[np.ndarray], reference: list[np.ndarray]) -> tuple[int, float]:
    equal = sum(np.array_equal(a, b) for a, b in zip(batch_rows, reference))
    delta = max(float(np.max(np.abs(a - b))) for a, b in zip(batch_rows, reference))
    return equal, delta


def probe_invariance(llm, max_n: int = DEFAULT_MAX_N) -> Invariance:
    """Rows of verify batches of the curve's sizes of 2..max_n tokens against single-token
    decoding, behind a context of random tokens, on sequence 0 alone and (up to BRANCH_MAX_N
    tokens) as two branches on sequences 0 and 1.

    `llm` is a plookup.Llama. Leaves it reset. The two-branch checks need the branch's sequence in
    the cache the first one is in: a context with a KV stream per sequence (several slots) has no
    such sequence, and llama.cpp refuses a row on two streams, so there only single drafts are probed.
    """
    branches = _unified(llm)
    limit = context_limit(llm)
    max_n = max(2, min(max_n, llm.n_batch, limit // 2))
    n_context = max(0, min(CONTEXT_TOKENS, limit - 2 * max_n))
    rng = np.random.default_rng(0)
    tokens = rng.integers(100, llm.n_vocab(), n_context + 2 * max_n).tolist()
    context, path = tokens[:n_context], tokens[n_context : n_context + max_n]
    fork = path[: FORK_AT + 1] + tokens[n_context + max_n + FORK_AT + 1 :][: BRANCH_MAX_N - FORK_AT - 1]
    memory = llm._ctx.memory
    llm.reset()
    llm._ctx.kv_cache_clear()
    llm.eval(context)
    single = _single_decodes(llm, path, n_context)
    single_fork = _single_decodes(llm, fork, n_context)
    result = Invariance()
    for n in curve_sizes(max_n)[1:]:
        fill(llm._batch.batch, verify_rows(path[0], path[1:n], None, n_context))
        llm._ctx.decode(llm._batch)
        equal, delta = _compare([_logits(llm, r) for r in range(n)], single[:n])
        result.checks.append(RowCheck(n, False, equal, n, delta))
        llm._ctx.kv_cache_seq_rm(-1, n_context, -1)
        if branches and FORK_AT + 3 <= n <= BRANCH_MAX_N:  # pending, the shared token, and one token on each branch
            on_draft = (n - FORK_AT - 1 + 1) // 2
            on_branch = n - FORK_AT - 1 - on_draft
            draft = path[1 : FORK_AT + 1 + on_draft]
            branch = Branch(FORK_AT, np.array(fork[FORK_AT + 1 : FORK_AT + 1 + on_branch]))
            llama_cpp.llama_memory_seq_cp(memory, 0, 1, -1, -1)
            fill(llm._batch.batch, verify_rows(path[0], draft, branch, n_context))
            llm._ctx.decode(llm._batch)
            rows = [_logits(llm, r) for r in range(n)]
            reference = single[: FORK_AT + 1 + on_draft] + single_fork[FORK_AT + 1 : FORK_AT + 1 + on_branch]
            equal, delta = _compare(rows, reference)
            result.checks.append(RowCheck(n, True, equal, n, delta))
            llama_cpp.llama_memory_seq_rm(memory, 1, -1, -1)
            llm._ctx.kv_cache_seq_rm(-1, n_context, -1)
    llm.reset()
    llm._ctx.kv_cache_clear()
    llm._requires_eval = True
    return result


@dataclass
class SlotCheck:
    """Rows of one sequence in a batch that also carries another sequence's rows, against that
    sequence decoded alone (plain llama_cpp: one sequence in the cache, one token a decode)."""

    layout: str  # "unified" (one cache the sequences share) or "streams" (a stream per sequence)
    n: int  # the sequence's rows in the batch (pending + draft)
    equal: int
    rows: int
    max_delta: float


class _Decoder:
    """A context of its own over `llm`'s model, and a batch that :func:`plookup.verify.rows.fill` fills."""

    def __init__(self, llm, n_seq: int, unified: bool, n_ctx: int):
        params = llama_cpp.llama_context_default_params()
        for name in ("n_threads", "n_threads_batch", "n_batch", "n_ubatch", "flash_attn_type", "type_k", "type_v"):
            setattr(params, name, getattr(llm.context_params, name))
        params.n_ctx, params.n_seq_max, params.kv_unified = n_ctx, n_seq, unified
        self.llm = llm
        self._ctx = internals.LlamaContext(model=llm._model, params=params, verbose=False)
        self._batch = internals.LlamaBatch(n_tokens=params.n_batch, embd=0, n_seq_max=n_seq, verbose=False)

    def decode(self, rows, logits=None) -> None:
        fill(self._batch.batch, rows, logits)
        self._ctx.decode(self._batch)

    def prefill(self, tokens, seq: int) -> None:
        decode_chunks(self.decode, tokens, seq, self.llm.n_batch)

    def logits(self, row: int) -> np.ndarray:
        return logits_row(self._ctx, row, self.llm.n_vocab()).copy()

    def close(self) -> None:
        self._batch.close()
        self._ctx.close()


def probe_slots(llm, max_n: int = DEFAULT_MAX_N, context_tokens: int = CONTEXT_TOKENS) -> list[SlotCheck]:
    """Is a slot's verify batch, decoded beside another slot's rows, what its sequence decoded
    alone gives? Two sequences behind contexts of their own, the first half of each prefilled
    alone and the last LOCKSTEP tokens decoded in lockstep (a row of each per decode, so their
    cells interleave as running slots' do); then for n of the curve's sizes up to max_n, n rows of sequence 0 beside n rows of
    sequence 1, in a unified cache and in a stream per sequence, each row against single-token
    decodes of sequence 0 in a cache that holds it alone."""
    rng = np.random.default_rng(2)
    max_n = max(1, min(max_n, llm.n_batch // 2))  # n rows beside as many fill one batch
    limit = context_limit(llm)
    n_context = max(2, min(context_tokens, limit // 2 - max_n))
    half = max(1, n_context - LOCKSTEP)
    a = rng.integers(100, llm.n_vocab(), n_context + max_n).tolist()
    b = rng.integers(100, llm.n_vocab(), n_context + max_n).tolist()
    alone = _Decoder(llm, 1, True, 2 * (n_context + max_n))
    try:
        alone.prefill(a[:half], 0)
        for i in range(half, n_context):
            alone.decode(sequence_rows([a[i]], i, 0))
        reference = []
        for i, token in enumerate(a[n_context:]):
            alone.decode(sequence_rows([token], n_context + i, 0))
            reference.append(alone.logits(0))
    finally:
        alone.close()
    checks = []
    for layout in ("unified", "streams"):
        # A stream per sequence splits n_ctx between them: give each room for its context.
        pair = _Decoder(llm, 2, layout == "unified", 4 * (n_context + max_n))
        try:
            pair.prefill(a[:half], 0)
            pair.prefill(b[:half], 1)
            for i in range(half, n_context):
                pair.decode(sequence_rows([a[i]], i, 0) + sequence_rows([b[i]], i, 1))
            memory = pair._ctx.memory
            # Beside as many rows of the other sequence, and beside one (uneven drafts).
            for n, m in [(n, m) for n in curve_sizes(max_n) for m in sorted({1, n})]:
                rows = sequence_rows(a[n_context : n_context + n], n_context, 0)
                rows += sequence_rows(b[n_context : n_context + m], n_context, 1)
                pair.decode(rows)
                got = [pair.logits(r) for r in range(n)]
                equal, delta = _compare(got, reference[:n])
                checks.append(SlotCheck(layout, n, equal, n, delta))
                for seq in (0, 1):
                    llama_cpp.llama_memory_seq_rm(memory, seq, n_context, -1)
        finally:
            pair.close()
    return checks


def slots_exact(checks: list[SlotCheck], layout: str) -> bool:
    """Every probed row of a slot beside another slot's was bitwise its lone decode, in `layout`."""
    mine = [c for c in checks if c.layout == layout]
    return bool(mine) and all(c.equal == c.rows for c in mine)


def _unified(llm) -> bool:
    """Whether `llm`'s sequences share one KV cache (else each has a stream of its own)."""
    return bool(llm.context_params.kv_unified)


def _probe_path(llm, max_n: int, kind: str):
    tiled = "tiled" if tiled_from_environment() else "untiled"
    return cache_path("invariance", f"{curve_key(llm, max_n)}-{tiled}{kind}")


def cached_slot_invariance(llm, max_n: int = DEFAULT_MAX_N) -> list[SlotCheck]:
    """:func:`probe_slots` for `llm`, from the cache or measured now (seconds), keyed as
    :func:`cached_invariance` is."""
    return measured_once(
        _probe_path(llm, max_n, "-slots"), "exactness of slots side by side",
        parse=lambda data: [SlotCheck(**c) for c in data["checks"]],
        measure=lambda: probe_slots(llm, max_n),
        serialize=lambda checks: {"model": llm.model_path, "checks": [asdict(c) for c in checks]},
    )


def cached_invariance(llm, max_n: int = DEFAULT_MAX_N) -> Invariance:
    """:func:`probe_invariance` for `llm` up to max_n rows, from the cache or measured now (seconds
    for a small model; leaves `llm` reset). Keyed like the cost curve, plus the tiled switch."""
    return measured_once(
        # keyed by the layout too: rows in a stream of their own may round otherwise
        _probe_path(llm, max_n, "" if _unified(llm) else "-streams"), "exactness (verify batches against plain decoding)",
        parse=lambda data: Invariance([RowCheck(**c) for c in data["checks"]]),
        measure=lambda: probe_invariance(llm, max_n),
        serialize=lambda result: {"model": llm.model_path, "checks": [asdict(c) for c in result.checks]},
    )
