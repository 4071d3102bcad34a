"""The engine's handle on llama.cpp's context: the one place in :mod:`plookup.engine` that calls
llama.cpp on it.

Everything the engine asks of the context goes through a :class:`ContextHandle`: filling the batch
and decoding it, a row's logits (and a sampler reading a row), the memory's edits (a sequence
rolled back, copied, shifted, the whole memory cleared), the vocabulary's end-of-generation test,
and the sizes (``n_ctx``, ``n_batch``). :mod:`plookup.api.context` builds it from the
``llama_cpp.Llama`` it loaded; the engine's parts take it as an argument, so each is testable
against a fake handle without a model (tests/unit/test_engine_parts.py).
"""

from __future__ import annotations

from typing import Optional, Sequence

import llama_cpp
import numpy as np

from ..verify.backend import Chains
from ..verify.greedy import logits_row
from ..verify.rows import Row, decode_chunks, fill


class ContextHandle:
    """One llama_context, its batch and its model's vocabulary, as the engine uses them."""

    def __init__(self, ctx, batch, vocab, n_ctx: int, n_batch: int, n_vocab: int):
        """`ctx`, `batch`: llama_cpp's ``LlamaContext`` (whose ``decode`` may run on a decode
        thread: :mod:`.decode_thread`) and ``LlamaBatch``; `vocab`: the model's llama_vocab.
        `n_ctx`: the tokens a slot may hold; `n_batch`: the rows a decode may take."""
        self._ctx, self._batch, self._vocab = ctx, batch, vocab
        self.n_ctx, self.n_batch, self.n_vocab = n_ctx, n_batch, n_vocab

    # -- the batch, its decode and its rows

    def fill(self, rows: Sequence[Row], logits: Optional[Sequence[bool]] = None) -> None:
        """The batch's rows (:func:`plookup.verify.rows.fill`)."""
        fill(self._batch.batch, rows, logits)

    def decode(self) -> None:
        """One ``llama_decode`` of the batch as filled; raises where it fails."""
        self._ctx.decode(self._batch)

    def decode_rows(self, rows: Sequence[Row], logits: Optional[Sequence[bool]] = None) -> None:
        self.fill(rows, logits)
        self.decode()

    def prefill(self, tokens: Sequence[int], seq: int) -> None:
        """`tokens` from position 0 of sequence `seq`, n_batch a decode, as llama_cpp's ``eval``."""
        decode_chunks(self.decode_rows, tokens, seq, self.n_batch)

    def logits_row(self, i: int) -> np.ndarray:
        """Batch row i's logits, in llama.cpp's buffer (valid until the next decode)."""
        return logits_row(self._ctx, i, self.n_vocab)

    def sample(self, sampler, i: int) -> int:
        """`sampler` (``sample(ctx, row)``) on batch row i."""
        return sampler.sample(self._ctx, i)

    def backend_chains(self) -> Chains:
        """The record of greedy chains attached to this context's sequences."""
        return Chains(self._ctx)

    def is_eog(self, token: int) -> bool:
        return bool(llama_cpp.llama_vocab_is_eog(self._vocab, token))

    # -- the memory (KV cells)

    @property
    def memory(self):
        return self._ctx.memory

    @property
    def can_shift(self) -> bool:
        """Whether the memory can shift cells' positions (llama-server's --cache-reuse needs it)."""
        return bool(llama_cpp.llama_memory_can_shift(self.memory))

    def roll_back(self, seq: int, n: int) -> bool:
        """Roll sequence `seq` back to its first `n` cells: drop its cells from position n on (no
        sequence, < 0: nothing to drop). False where the memory refused."""
        return seq < 0 or bool(self._ctx.kv_cache_seq_rm(seq, n, -1))

    def remove(self, seq: int, p0: int, p1: int) -> bool:
        """Drop sequence `seq`'s cells at positions [p0, p1) (p1 < 0: to the end)."""
        return bool(llama_cpp.llama_memory_seq_rm(self.memory, seq, p0, p1))

    def shift(self, seq: int, p0: int, p1: int, delta: int) -> None:
        """Move sequence `seq`'s cells at positions [p0, p1) by `delta` positions."""
        llama_cpp.llama_memory_seq_add(self.memory, seq, p0, p1, delta)

    def span(self, seq: int) -> tuple[int, int]:
        """The lowest and highest positions sequence `seq` holds ((-1, -1): none)."""
        return (int(llama_cpp.llama_memory_seq_pos_min(self.memory, seq)),
                int(llama_cpp.llama_memory_seq_pos_max(self.memory, seq)))

    def copy(self, source: int, target: int, p0: int = -1, p1: int = -1) -> None:
        """Sequence `source`'s cells at [p0, p1) (< 0: all) shared with sequence `target`."""
        llama_cpp.llama_memory_seq_cp(self.memory, source, target, p0, p1)

    def clear(self) -> None:
        """Every sequence's cells dropped (every kind of memory can do that)."""
        self._ctx.kv_cache_clear()
