"""`NgramIndex`: latest earlier occurrence and count of the trailing n-grams.

Owns the arrays of `plookup.native.ngram_hash` (layout, hashing and memory are
documented there) and grows them by doubling before each kernel call; the history itself is an
array of its own, grown alike, or a borrowed buffer that is never grown (`plookup.index.tokens`).
"""

from __future__ import annotations

import numpy as np

from ..native import ngram_hash as ngh
from .tokens import TokenArrays, raise_bad_token

MAX_N = 64
_INITIAL_SLOTS = 16


class NgramIndex(TokenArrays):
    """For each n in [n_min, n_max]: where and how often the last n tokens occurred before."""

    def __init__(self, n_min: int = 1, n_max: int = 8, capacity: int = 1024) -> None:
        if not 1 <= n_min <= n_max <= MAX_N:
            raise ValueError(
                f"need 1 <= n_min <= n_max <= {MAX_N}, got n_min={n_min}, n_max={n_max}"
            )
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.n_min, self.n_max = int(n_min), int(n_max)
        self._own(int(capacity))
        self._keys = np.empty(_INITIAL_SLOTS, np.uint64)
        self._entries = np.empty((_INITIAL_SLOTS, 2), np.int32)
        self._earlier = np.empty((self.n_max + 1, 2), np.int64)
        self._meta = np.zeros(ngh.NGRAM_META_SIZE, np.int64)
        self.reset()

    def __len__(self) -> int:
        return int(self._meta[ngh.N_TOKENS])

    def _arrays(self) -> tuple[np.ndarray, ...]:
        return self._tokens, self._keys, self._entries, self._earlier, self._meta

    def _reserve(self, new_count: int) -> None:
        """Room for the worst-case new keys of `new_count` more tokens at load <= 0.5."""
        entries_needed = int(self._meta[ngh.N_ENTRIES]) + new_count * (self.n_max - self.n_min + 1)
        if 2 * entries_needed > self._keys.size:
            slots = self._keys.size
            while 2 * entries_needed > slots:
                slots *= 2
            old_keys, old_entries = self._keys, self._entries
            self._keys = np.full(slots, ngh.EMPTY_KEY, np.uint64)
            self._entries = np.empty((slots, 2), np.int32)
            ngh.ngram_rehash(old_keys, old_entries, self._keys, self._entries)

    def _append(self, new_tokens: np.ndarray) -> None:
        self._reserve(new_tokens.size)
        bad = ngh.ngram_extend(
            new_tokens, self.n_min, self.n_max,
            self._tokens, self._keys, self._entries, self._earlier, self._meta,
        )
        if bad >= 0:
            raise_bad_token(new_tokens, bad)

    def reset(self) -> None:
        """Forget the history; the grown arrays (and a borrowed buffer) are kept for reuse."""
        ngh.ngram_reset(self._keys, self._earlier, self._meta)

    def lookup(self, n: int) -> tuple[int, int]:
        """(end, count) of the earlier occurrences of the last n tokens; (-1, 0) if none."""
        if not self.n_min <= n <= self.n_max:
            raise ValueError(f"n must be in [{self.n_min}, {self.n_max}], got {n}")
        return int(self._earlier[n, ngh.END]), int(self._earlier[n, ngh.COUNT])

    def match(self) -> tuple[int, int, int]:
        """(n, end, count) for the largest n whose n-gram occurred earlier; (0, -1, 0) if none."""
        n = int(self._meta[ngh.MATCH_N])
        if n == 0:
            return 0, -1, 0
        return n, int(self._earlier[n, ngh.END]), int(self._earlier[n, ngh.COUNT])

    def continuation(self, max_len: int) -> tuple[np.ndarray, np.ndarray]:
        """(draft, agree): up to `max_len` tokens that followed the most recent earlier occurrence
        of the longest matching n-gram, as :meth:`plookup.index.suffix.SuffixIndex.continuation`
        answers; with no agreement statistic kept, every one trusted alike (agree 1)."""
        _, end, _ = self.match()
        tokens = self.tokens[end + 1 : end + 1 + max_len]
        return tokens, np.ones(len(tokens))
