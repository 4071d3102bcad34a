"""Greedy rows read as an argmax: llama_cpp's greedy sampler chain without a candidate array.

llama_cpp samples a row with ``llama_sampler_sample``, which copies the row's logits into an array
of (id, logit, p) for the whole vocabulary (151,936 entries for Qwen2.5) and walks it through the
chain; at temperature 0 the chain is llama.cpp's penalties sampler, then greedy. Where no grammar
runs and only the repeat penalty is set, :class:`GreedyRows` picks the same token from the row in
place: llama.cpp's greedy takes the first index of the largest logit, as ``np.argmax`` does, and
the repeat penalty changes only the logits of the last ``last_n`` sampled tokens, in float32:

    logit <= 0:  logit * penalty        else:  logit / penalty

which numpy's float32 arithmetic rounds as llama.cpp's does. Frequency and presence penalties
subtract ``count * freq + (count > 0) * present``, an expression the compiler may fuse into one
rounding or two: those chains stay llama.cpp's.
"""

from __future__ import annotations

import ctypes
from collections import deque
from typing import Optional

import llama_cpp
import numpy as np

# llama_get_logits_ith returning the row's address as an int: a view of it then costs a
# frombuffer, not numpy.ctypeslib's pointer casts (a few µs a row, more than the argmax's share).
_logits_address = llama_cpp.llama_cpp._lib["llama_get_logits_ith"]
_logits_address.argtypes = [llama_cpp.llama_context_p_ctypes, ctypes.c_int32]
_logits_address.restype = ctypes.c_void_p


def logits_row(ctx, i: int, n_vocab: int) -> np.ndarray:
    """Batch row i's logits in llama.cpp's own buffer, no copy (`ctx`: a llama_cpp LlamaContext)."""
    address = _logits_address(ctx.ctx, i)
    if not address:
        raise ValueError(f"llama.cpp has no logits for batch row {i}")
    # ctypes keeps one array type per (item type, length): c_float * n_vocab is built once.
    return np.frombuffer((ctypes.c_float * n_vocab).from_address(address), dtype=np.float32)


class GreedyRows:
    """``sample(ctx, i)`` as llama_cpp's greedy chain (repeat penalty, then greedy) would.

    The penalty's window is the last `last_n` tokens this sampler chose, as llama.cpp's penalties
    sampler keeps them (every sampled token is accepted, the prompt's are not).
    """

    name = "argmax"

    def __init__(self, n_vocab: int, repeat_penalty: float = 1.0, last_n: int = 0):
        self.n_vocab = n_vocab
        self.penalty = np.float32(repeat_penalty)
        penalised = last_n > 0 and self.penalty != np.float32(1.0)  # llama.cpp: max(last_n, 0)
        self.window: Optional[deque] = deque(maxlen=last_n) if penalised else None

    def row(self, ctx, i: int) -> np.ndarray:
        return logits_row(ctx, i, self.n_vocab)

    def sample(self, ctx, i: int) -> int:
        row = self.row(ctx, i)
        if not self.window:
            token = int(row.argmax())
        else:
            ids = np.fromiter(set(self.window), dtype=np.int64)
            raw = row[ids]
            # The row is llama.cpp's own buffer: penalise in place for the argmax, then put it back
            # (stopping criteria and the drafter's calibration read the row afterwards).
            row[ids] = np.where(raw <= 0, raw * self.penalty, raw / self.penalty)
            try:
                token = int(row.argmax())
            finally:
                row[ids] = raw
        if self.window is not None:
            self.window.append(token)
        return token


def greedy_rows(
    n_vocab: int, last_n: int, temp: float, grammar, repeat_penalty: float,
    frequency_penalty: float, presence_penalty: float, **_,
) -> Optional[GreedyRows]:
    """A :class:`GreedyRows` where it picks the chain's token (llama_cpp's sampling arguments),
    else None: sampling at random, a grammar, frequency or presence penalties."""
    if temp != 0 or grammar is not None or frequency_penalty != 0 or presence_penalty != 0:
        return None
    return GreedyRows(n_vocab, repeat_penalty, last_n)
