"""Log-probabilities of emitted tokens, read from the verify rows that chose them.

llama_cpp gives ``logprobs`` only with ``logits_all=True``: a row of n_vocab floats kept for every
position, log-softmaxed when the completion is formatted. A verify step has the row of every
emitted token in llama.cpp's buffer until the next decode overwrites it, so a request that asks
reads each emitted token's row there, once, with llama_cpp's own ``logits_to_logprobs`` (the same
float32 values from the same logits), and keeps only what its answer needs: the token's value and
the ``top`` most likely tokens', in llama_cpp's order (largest first; among equal values, the
larger id first, as its ``sorted(zip(logprobs, ids), reverse=True)`` gives). Rows of rejected
draft tokens are never read: only the rows the acceptance rule took a token from
(:attr:`plookup.verify.accept.Verdict.rows`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import llama_cpp
import numpy as np


@dataclass(frozen=True)
class TokenLogprob:
    token: int
    logprob: float  # the token's log-probability under the row that chose it
    top: tuple[tuple[int, float], ...]  # (id, log-probability) of the most likely tokens, first first


def token_logprob(logits: np.ndarray, token: int, top: int) -> TokenLogprob:
    """`token`'s value and the `top` most likely tokens' under the row `logits` (read, not changed)."""
    logprobs = llama_cpp.Llama.logits_to_logprobs(logits)
    top = min(top, len(logprobs))
    best: tuple[tuple[int, float], ...] = ()
    if top > 0:
        # The top-th largest value, then every id at or above it (ties at the cut included), sorted
        # by value and then id, both descending: a partition, not a sort of the whole vocabulary.
        cut = np.partition(logprobs, len(logprobs) - top)[len(logprobs) - top]
        ids = np.flatnonzero(logprobs >= cut)
        order = np.lexsort((-ids, -logprobs[ids]))[:top]
        best = tuple((int(ids[i]), float(logprobs[ids[i]])) for i in order)
    return TokenLogprob(int(token), float(logprobs[token]), best)


@dataclass
class Logprobs:
    """What a request with logprobs asked for (`top` alternatives per token) and what its
    generation has emitted so far, in order: one :class:`TokenLogprob` per emitted token."""

    top: int
    emitted: list[TokenLogprob] = field(default_factory=list)

    def read(self, logits: np.ndarray, token: int) -> None:
        self.emitted.append(token_logprob(logits, token, self.top))
