"""`SuffixIndex`: the token history in an online suffix automaton.

Owns the automaton's arrays of `plookup.native.suffix_automaton` and grows them (by doubling)
before each kernel call; the history itself is an array of its own, grown alike, or a borrowed
buffer that is never grown (`plookup.index.tokens`). See the kernels' module for the layout, the
exactness limit (WALK_CAP) and the memory per token (116..140 bytes per token of capacity), and
`plookup.native.suffix_automaton_query` for the queries.
"""

from __future__ import annotations

import numpy as np

from ..native import suffix_automaton as sam
from ..native import suffix_automaton_query as sam_query
from .tokens import TokenArrays, as_token_array, raise_bad_token


def _slot_count(capacity: int) -> int:
    """Power of two holding the worst-case 3 * capacity edges at load factor <= 0.5."""
    return 1 << (6 * capacity - 1).bit_length()


class SuffixIndex(TokenArrays):
    """Longest repeated suffix of a growing token history, and what followed it."""

    def __init__(self, capacity: int = 1024) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self._meta = np.zeros(sam.SAM_META_SIZE, np.int64)
        self._own(int(capacity))
        self._allocate(int(capacity))
        self.reset()

    def _allocate(self, capacity: int) -> None:
        """The automaton's arrays, for a history of `capacity` tokens."""
        self._states = np.empty((2 * capacity, sam.STATE_FIELDS), np.int32)
        self._edges = np.empty((3 * capacity, sam.EDGE_FIELDS), np.int32)
        self._slots = np.empty(_slot_count(capacity), np.int32)

    def _grow(self, needed: int) -> None:
        capacity = len(self._states) // 2
        while capacity < needed:
            capacity *= 2
        states, edges = self._states, self._edges
        n_states, n_edges = int(self._meta[sam.N_STATES]), int(self._meta[sam.N_EDGES])
        self._allocate(capacity)
        self._states[:n_states] = states[:n_states]
        self._edges[:n_edges] = edges[:n_edges]
        self._slots[:] = -1
        sam.sam_rehash(self._edges, n_edges, self._slots)

    def __len__(self) -> int:
        return int(self._meta[sam.N_TOKENS])

    def _arrays(self) -> tuple[np.ndarray, ...]:
        return self._tokens, self._states, self._edges, self._slots, self._meta

    def _append(self, new_tokens: np.ndarray) -> None:
        needed = len(self) + new_tokens.size
        if needed > len(self._states) // 2:
            self._grow(needed)
        bad = sam.sam_extend(
            new_tokens, self._tokens, self._states, self._edges, self._slots, self._meta
        )
        if bad >= 0:
            raise_bad_token(new_tokens, bad)

    def reset(self) -> None:
        """Forget the history; the grown arrays (and a borrowed buffer) are kept for reuse."""
        sam.sam_reset(self._states, self._slots, self._meta)

    def match(self) -> tuple[int, int, int]:
        """(length, end, count) of the longest suffix that also occurs earlier.

        `end` is the most recent earlier occurrence's last index and `count` the
        number of earlier occurrences; (0, -1, 0) when nothing repeats.
        """
        meta = self._meta
        return int(meta[sam.MATCH_LEN]), int(meta[sam.MATCH_END]), int(meta[sam.MATCH_COUNT])

    def continuation(self, max_len: int) -> tuple[np.ndarray, np.ndarray]:
        """(draft, agree): up to `max_len` tokens that followed the match's most recent
        earlier occurrence, and for each the fraction of the context's followed
        occurrences that continued with it."""
        return sam_query.sam_continuation(
            max_len, self._tokens, self._states, self._edges, self._slots, self._meta
        )

    def alternative(self, branch_point: int, max_len: int) -> tuple[np.ndarray, np.ndarray]:
        """(draft, agree) of the runner-up to `continuation`'s token at `branch_point`: the
        context's most frequent other next token, then what followed it most recently; up to
        `max_len` tokens, empty when the context was never followed by another token."""
        return sam_query.sam_alternative(
            branch_point, max_len, self._tokens, self._states, self._edges, self._slots, self._meta
        )

    # -- matching an external token stream against the indexed text (see plookup.index.memory)

    def feed(self, tokens, state: int = 0, length: int = 0) -> tuple[int, int]:
        """Advance a streaming match by `tokens`; returns the new (state, length).

        (state, length) stands for the longest suffix of the stream fed so far that occurs
        in the history; start from (0, 0). A token outside [0, 2**31 - 1] matches nothing.
        The pair is only valid for the history it was computed on: any `extend` or `reset`
        invalidates it. O(1) amortised per token.
        """
        state, length = sam_query.sam_feed(
            as_token_array(tokens), state, length, self._states, self._edges, self._slots
        )
        return int(state), int(length)

    def state_continuation(self, state: int, length: int, max_len: int):
        """(draft, agree) for a streaming match: up to `max_len` tokens that followed the
        matched string's most recent occurrence (its state's RECENT end), clipped at the end of the
        history, and for each the fraction of the context's followed occurrences that
        continued with it (exact as for `continuation`)."""
        return sam_query.sam_state_continuation(
            state, length, max_len, self._tokens, self._states, self._edges, self._slots, self._meta
        )
