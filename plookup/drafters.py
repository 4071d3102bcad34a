"""Drafters: an index over the tokens seen so far, and a policy that turns its match into a draft.

Both drafters answer the same calls, so the decoder never knows which one it drives:

- ``sync(tokens)``: make the index hold exactly ``tokens`` (appends only the new suffix when the
  indexed history is a prefix of them, rebuilds otherwise);
- ``extend(tokens)``: append verified tokens;
- ``propose(max_draft)``: up to ``max_draft`` int32 tokens, empty when there is no match worth it;
- ``observe(drafted, accepted)``: the verdict on the last proposal, which calibrates the policy.

Each is also a ``llama_cpp.llama_speculative.LlamaDraftModel`` (``drafter(input_ids) -> draft``) for
``llama_cpp.Llama(draft_model=...)``, keeping its index incremental across those calls.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
from llama_cpp.llama_speculative import LlamaDraftModel

from .ngram_index import NgramIndex
from .policy import DraftPolicy
from .suffix_index import SuffixIndex

EMPTY_DRAFT = np.zeros(0, dtype=np.int32)

# The LlamaDraftModel adapter has no verdict channel and pays llama-cpp-python's logits_all verify
# cost, so it drafts a fixed length like llama_cpp's own prompt-lookup drafter.
ADAPTER_MAX_DRAFT = 10


class IndexDrafter(LlamaDraftModel):
    """Shared plumbing: the index is the only copy of the history; the policy sizes drafts."""

    index: SuffixIndex | NgramIndex

    def __init__(self, index, min_match: int):
        self.index = index
        self.policy = DraftPolicy(min_match=min_match)
        self._last_match_length = 0

    def sync(self, tokens: npt.ArrayLike) -> None:
        tokens = np.asarray(tokens, dtype=np.int32)
        n = len(self.index)
        if n <= len(tokens) and np.array_equal(self.index.tokens, tokens[:n]):
            self.index.extend(tokens[n:])
        else:
            self.index.reset()
            self.index.extend(tokens)

    def extend(self, tokens: npt.ArrayLike) -> None:
        self.index.extend(tokens)

    def warm_up(self) -> None:
        """Compile or load every kernel a generation calls, leaving the index empty."""
        self.sync(np.array([1, 2, 1, 2, 1], dtype=np.int32))
        self._candidate(4)
        self.index.reset()

    def _candidate(self, max_draft: int) -> tuple[int, np.ndarray, np.ndarray]:
        """(match length, continuation tokens, per-token agreement) from the index."""
        raise NotImplementedError

    def propose(self, max_draft: int) -> np.ndarray:
        self._last_match_length = 0
        if max_draft <= 0:
            return EMPTY_DRAFT
        length, draft, agree = self._candidate(max_draft)
        n = self.policy.choose(length, agree)
        if n == 0:
            return EMPTY_DRAFT
        self._last_match_length = length
        return draft[:n]

    def observe(self, drafted: int, accepted: int) -> None:
        if drafted:
            self.policy.observe(self._last_match_length, drafted, accepted)

    def __call__(self, input_ids: npt.NDArray[np.intc], /, **kwargs: Any) -> npt.NDArray[np.intc]:
        self.sync(input_ids)
        return self.propose(ADAPTER_MAX_DRAFT).astype(np.intc)


class SuffixDrafter(IndexDrafter):
    """Drafts from the longest earlier match of the whole current suffix (a suffix automaton)."""

    def __init__(self, min_match: int = 2):
        super().__init__(SuffixIndex(), min_match)

    def _candidate(self, max_draft: int):
        length, _, _ = self.index.match()
        if length < self.policy.min_match:
            return 0, EMPTY_DRAFT, EMPTY_DRAFT
        draft, agree = self.index.continuation(max_draft)
        return length, draft, agree


class NgramDrafter(IndexDrafter):
    """Drafts from the most recent earlier occurrence of the longest matching n-gram (n ≤ n_max).

    Without a suffix structure there is no agreement statistic beyond the n-gram's own count, so
    every continuation token is trusted alike and the policy sizes the draft from n alone.
    """

    def __init__(self, n_min: int = 2, n_max: int = 8):
        super().__init__(NgramIndex(n_min=n_min, n_max=n_max), n_min)

    def _candidate(self, max_draft: int):
        n, end, _ = self.index.match()
        if n < self.policy.min_match:
            return 0, EMPTY_DRAFT, EMPTY_DRAFT
        draft = self.index.tokens[end + 1 : end + 1 + max_draft]
        return n, draft, np.ones(len(draft))
