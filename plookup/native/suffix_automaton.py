"""Online suffix automaton over int32 tokens, as numba kernels on caller-owned arrays.

The kernels never allocate or grow storage (except the two small result arrays of
`sam_continuation` / `sam_state_continuation`); `plookup.index.suffix.SuffixIndex` sizes the arrays for the
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

Besides the repeated suffix of the history itself (meta MATCH_*), `sam_feed` /
`sam_state_continuation` match an external token stream against the indexed text (the
cross-request memory of `plookup.index.memory`).
"""

import numpy as np
from numba import njit

from .token_range import INT32_MAX, first_out_of_range

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
def _find_edge(state, token, edges, slots):
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
        edge = _find_edge(p, token, edges, slots)
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
                edge = _find_edge(p, token, edges, slots)
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


@njit(cache=True)
def _continue_from(state, end, max_len, tokens, states, edges, slots, meta):
    """(draft, agree) for a matched string w in `state` with an occurrence ending at `end`.

    draft[k] = tokens[end + 1 + k], clipped at the end of the text; agree[k] =
    occ(w_k + draft[k]) / followable(w_k), where w_k is w extended by draft[:k] and
    followable(w) counts the occurrences of w that have a next token, i.e. all but one
    ending at n - 1.  Every string of a state has the same end positions, so COUNT and
    the transitions of `state` answer for w whatever its length within the state.
    """
    n = meta[N_TOKENS]
    length = max(min(max_len, n - 1 - end), 0) if state > 0 else 0
    draft = np.empty(length, np.int32)
    agree = np.empty(length, np.float64)
    for k in range(length):
        token = tokens[end + 1 + k]
        # RECENT == n - 1 exactly when the last position's walk reached the state, i.e.
        # w_k ends at n - 1 and COUNT includes that unfollowable occurrence.  Past
        # WALK_CAP both are stale together, so the ratio stays consistent.
        followable = states[state, COUNT] - (1 if states[state, RECENT] == n - 1 else 0)
        state = edges[_find_edge(state, token, edges, slots), TARGET]
        draft[k] = token
        # Clamp: only stale (past WALK_CAP) counts can push this outside [0, 1].
        agree[k] = min(1.0, states[state, COUNT] / max(followable, 1))
    return draft, agree


@njit(cache=True)
def sam_continuation(max_len, tokens, states, edges, slots, meta):
    """Draft what followed the most recent earlier occurrence of the match.

    See `_continue_from`; the match is the longest repeated suffix (meta MATCH_*).
    """
    state = meta[MATCH_STATE] if meta[MATCH_LEN] >= 1 else 0
    return _continue_from(state, meta[MATCH_END], max_len, tokens, states, edges, slots, meta)


@njit(cache=True)
def sam_feed(new_tokens, state, length, states, edges, slots):
    """Advance a streaming match over int64 `new_tokens`; returns the new (state, length).

    (state, length) describes the longest suffix of an external token stream that occurs
    in the indexed text: `length` tokens long, in automaton state `state` ((0, 0): the
    empty string at the root).  Per token: follow its transition, or shorten the match
    along suffix links (to each link's LEN) until one exists or the root is reached;
    O(1) amortised, as `length` grows by at most 1 per token and each link step shrinks
    it.  A token outside [0, 2**31 - 1] occurs nowhere and resets the match to the root.
    The pair stays valid only while the text is unchanged: appending may split states.
    """
    for i in range(new_tokens.size):
        token = new_tokens[i]
        if token < 0 or token > INT32_MAX:
            state, length = 0, 0
            continue
        while True:
            edge = _find_edge(state, token, edges, slots)
            if edge >= 0:
                state = edges[edge, TARGET]
                length += 1
                break
            if state == 0:
                length = 0
                break
            state = states[state, LINK]
            length = states[state, LEN]
    return state, length


@njit(cache=True)
def sam_state_continuation(state, length, max_len, tokens, states, edges, slots, meta):
    """(draft, agree) continuing a streaming match (see `sam_feed`) from its state's RECENT.

    RECENT is the most recent end of the matched string in the text (exact within
    WALK_CAP, else a true but possibly older occurrence); the draft is what followed it,
    clipped at the end of the text, so it is empty when that end is the last token.
    agree[k] is as for `sam_continuation` (`_continue_from`) and exact within WALK_CAP.
    Here the followable correction never applies: w_k's latest end is end + k < n - 1
    (else the draft would have stopped), so no occurrence of w_k ends at n - 1 and
    followable(w_k) = COUNT(w_k).
    """
    if length < 1 or state <= 0:
        state = 0
    end = states[state, RECENT]
    return _continue_from(state, end, max_len, tokens, states, edges, slots, meta)


@njit(cache=True)
def sam_alternative(branch_point, max_len, tokens, states, edges, slots, meta):
    """(draft, agree) of the runner-up continuation at `branch_point` of `sam_continuation`'s.

    With w the match and x = `sam_continuation`'s draft, the context at the branch point is
    w_k = w + x[:k] (k = branch_point < len(x)). Of w_k's out-edges other than x[k], the one
    followed most often (ties: most recently) gives the alternative token t; the draft is t and
    then what followed w_k + t's most recent occurrence, up to `max_len` tokens in all. agree[0]
    = occ(w_k + t) / followable(w_k), the rest as for `_continue_from`. Empty when w_k was only
    ever followed by x[k].
    """
    state = meta[MATCH_STATE] if meta[MATCH_LEN] >= 1 else 0
    end = meta[MATCH_END]
    n = meta[N_TOKENS]
    if state <= 0 or max_len < 1 or branch_point < 0 or end + 1 + branch_point > n - 1:
        return np.empty(0, np.int32), np.empty(0, np.float64)
    for k in range(branch_point):
        state = edges[_find_edge(state, tokens[end + 1 + k], edges, slots), TARGET]
    taken = tokens[end + 1 + branch_point]
    best = -1
    e = states[state, FIRST_EDGE]
    while e >= 0:
        target = edges[e, TARGET]
        if edges[e, TOKEN] != taken and (
            best < 0
            or states[target, COUNT] > states[edges[best, TARGET], COUNT]
            or (
                states[target, COUNT] == states[edges[best, TARGET], COUNT]
                and states[target, RECENT] > states[edges[best, TARGET], RECENT]
            )
        ):
            best = e
        e = edges[e, NEXT]
    if best < 0:
        return np.empty(0, np.int32), np.empty(0, np.float64)
    target = edges[best, TARGET]
    followable = states[state, COUNT] - (1 if states[state, RECENT] == n - 1 else 0)
    rest, rest_agree = _continue_from(
        target, states[target, RECENT], max_len - 1, tokens, states, edges, slots, meta
    )
    draft = np.empty(rest.size + 1, np.int32)
    agree = np.empty(rest.size + 1, np.float64)
    draft[0] = edges[best, TOKEN]
    agree[0] = min(1.0, states[target, COUNT] / max(followable, 1))
    draft[1:] = rest
    agree[1:] = rest_agree
    return draft, agree
