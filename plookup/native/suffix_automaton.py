"""Online suffix automaton over int32 tokens, as numba kernels on caller-owned arrays.

The kernels never allocate or grow storage (except the small result arrays of the queries in
`plookup.native.suffix_automaton_query`); `plookup.index.suffix.SuffixIndex` sizes the arrays for the
worst case before each call.  Storage for a capacity of C tokens:

- ``tokens``  int32[C]                  the indexed history
- ``states``  int32[2C, 5]              LEN, LINK, COUNT, RECENT, FIRST_EDGE per state
                                        (an automaton over n tokens has at most 2n states)
- ``edges``   int32[3C, 4]              SRC, TOKEN, TARGET, NEXT per transition
                                        (at most 3n transitions); NEXT chains a state's
                                        out-edges so a clone can copy them
- ``slots``   int32[2**ceil(log2(6C))]  open-addressing table (linear probing) from
                                        (state, token) to an edge index, -1 = empty;
                                        load factor stays <= 0.5 at the worst-case edge count

Memory: 4 + 2*20 + 3*16 + 4*(6..12) = 116..140 bytes per token of capacity
(124 when C is a power of two).  Capacity doubles, so a grown index holds
116..280 bytes per indexed token.

COUNT (= |endpos|, occurrences) and RECENT (largest end position) need +1 / = pos on
every state of the suffix-link path of each new position.  That walk is capped at
WALK_CAP states to keep an append O(1) amortised even on runs like "aaaa...": for a
state within WALK_CAP link-levels of every position appended after it, COUNT and
RECENT are exact; otherwise RECENT is still a true (not necessarily the latest)
occurrence and COUNT a lower bound.  Histories of at most WALK_CAP tokens are exact.

This module builds the automaton (`sam_reset`, `sam_extend`, `sam_rehash`);
`plookup.native.suffix_automaton_query` reads it: drafts from the repeated suffix of the
history itself (meta MATCH_*), and `sam_feed` / `sam_state_continuation`, which match an
external token stream against the indexed text (the cross-request memory of
`plookup.index.memory`).
"""

import numpy as np
from numba import njit

from .token_range import first_out_of_range

WALK_CAP = 256

# states columns
LEN = 0
LINK = 1
COUNT = 2
RECENT = 3
FIRST_EDGE = 4
STATE_FIELDS = 5

# edges columns
SRC = 0
TOKEN = 1
TARGET = 2
NEXT = 3
EDGE_FIELDS = 4

# meta entries (int64[SAM_META_SIZE])
N_TOKENS = 0
N_STATES = 1
N_EDGES = 2
LAST = 3  # state of the whole history
MATCH_STATE = 4  # link(LAST): longest suffix that also occurs earlier
MATCH_LEN = 5
MATCH_END = 6  # most recent earlier end of that suffix, -1 if none
MATCH_COUNT = 7  # earlier occurrences of that suffix
SAM_META_SIZE = 8

_FIBONACCI = np.uint64(0x9E3779B97F4A7C15)


@njit(cache=True, inline="always")
def _slot_of(state, token, mask):
    key = (np.uint64(state) << np.uint64(32)) | np.uint64(token)
    mixed = key * _FIBONACCI
    mixed ^= mixed >> np.uint64(32)  # Fibonacci hashing puts the entropy in the high bits
    return np.int64(mixed & np.uint64(mask))


@njit(cache=True)
def find_edge(state, token, edges, slots):
    """The edge out of `state` on `token`, or -1 (the queries follow edges with it too)."""
    mask = slots.size - 1
    slot = _slot_of(state, token, mask)
    while True:
        edge = slots[slot]
        if edge < 0:
            return -1
        if edges[edge, SRC] == state and edges[edge, TOKEN] == token:
            return edge
        slot = (slot + 1) & mask


@njit(cache=True)
def _insert_slot(edge, edges, slots):
    mask = slots.size - 1
    slot = _slot_of(edges[edge, SRC], edges[edge, TOKEN], mask)
    while slots[slot] >= 0:
        slot = (slot + 1) & mask
    slots[slot] = edge


@njit(cache=True)
def _add_edge(src, token, target, states, edges, slots, meta):
    edge = meta[N_EDGES]
    meta[N_EDGES] = edge + 1
    edges[edge, SRC] = src
    edges[edge, TOKEN] = token
    edges[edge, TARGET] = target
    edges[edge, NEXT] = states[src, FIRST_EDGE]
    states[src, FIRST_EDGE] = edge
    _insert_slot(edge, edges, slots)


@njit(cache=True)
def _new_state(length, link, count, recent, states, meta):
    state = meta[N_STATES]
    meta[N_STATES] = state + 1
    states[state, LEN] = length
    states[state, LINK] = link
    states[state, COUNT] = count
    states[state, RECENT] = recent
    states[state, FIRST_EDGE] = -1
    return state


@njit(cache=True)
def _append(token, tokens, states, edges, slots, meta):
    pos = meta[N_TOKENS]
    tokens[pos] = token
    meta[N_TOKENS] = pos + 1
    last = meta[LAST]
    cur = _new_state(states[last, LEN] + 1, 0, 0, pos, states, meta)

    p = last
    edge = -1
    while p >= 0:
        edge = find_edge(p, token, edges, slots)
        if edge >= 0:
            break
        _add_edge(p, token, cur, states, edges, slots, meta)
        p = states[p, LINK]

    link = 0
    if p >= 0:
        q = edges[edge, TARGET]
        if states[p, LEN] + 1 == states[q, LEN]:
            link = q
        else:
            # q's endpos does not yet include pos, the clone's does (after the walk below)
            clone = _new_state(
                states[p, LEN] + 1, states[q, LINK], states[q, COUNT], states[q, RECENT], states, meta
            )
            e = states[q, FIRST_EDGE]
            while e >= 0:
                _add_edge(clone, edges[e, TOKEN], edges[e, TARGET], states, edges, slots, meta)
                e = edges[e, NEXT]
            while p >= 0:
                edge = find_edge(p, token, edges, slots)
                if edges[edge, TARGET] != q:
                    break
                edges[edge, TARGET] = clone
                p = states[p, LINK]
            states[q, LINK] = clone
            link = clone
    states[cur, LINK] = link
    meta[LAST] = cur

    # Read the match before the walk below adds this position to link's endpos.
    meta[MATCH_STATE] = link
    meta[MATCH_LEN] = states[link, LEN]
    meta[MATCH_END] = states[link, RECENT] if link > 0 else -1
    meta[MATCH_COUNT] = states[link, COUNT] if link > 0 else 0

    state = cur
    depth = 0
    while state > 0 and depth < WALK_CAP:
        states[state, COUNT] += 1
        states[state, RECENT] = pos
        state = states[state, LINK]
        depth += 1


@njit(cache=True)
def sam_reset(states, slots, meta):
    """Empty the automaton: only the root state (empty string), no edges."""
    slots[:] = -1
    meta[:] = 0
    meta[MATCH_END] = -1
    states[0, LEN] = 0
    states[0, LINK] = -1
    states[0, COUNT] = 0
    states[0, RECENT] = -1
    states[0, FIRST_EDGE] = -1
    meta[N_STATES] = 1


@njit(cache=True)
def sam_extend(new_tokens, tokens, states, edges, slots, meta):
    """Append int64 `new_tokens`; the arrays must already have room for them.

    Returns -1, or the index of the first token outside [0, 2**31 - 1], in which
    case nothing is appended.
    """
    bad = first_out_of_range(new_tokens)
    if bad >= 0:
        return bad
    for i in range(new_tokens.size):
        _append(np.int32(new_tokens[i]), tokens, states, edges, slots, meta)
    return -1


@njit(cache=True)
def sam_rehash(edges, n_edges, slots):
    """Fill an empty (all -1) `slots` table with edges[0:n_edges]."""
    for edge in range(n_edges):
        _insert_slot(edge, edges, slots)
