"""Queries on the suffix automaton of :mod:`plookup.native.suffix_automaton` (its layout, WALK_CAP
and exactness limits are described there), as numba kernels: a module of its own, since they only
read the arrays that module's kernels build.

- `sam_continuation` / `sam_alternative`: a draft from the longest repeated suffix of the history
  itself (meta MATCH_*), and the runner-up at a branch point;
- `sam_feed` / `sam_state_continuation`: a streaming match of an external token stream against the
  indexed text (the cross-request memory of `plookup.index.memory`), and its draft.

Each allocates only its two small result arrays.
"""

import numpy as np
from numba import njit

from .suffix_automaton import (
    COUNT,
    FIRST_EDGE,
    LEN,
    LINK,
    MATCH_END,
    MATCH_LEN,
    MATCH_STATE,
    N_TOKENS,
    NEXT,
    RECENT,
    TARGET,
    TOKEN,
    find_edge,
)
from .token_range import INT32_MAX


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
        state = edges[find_edge(state, token, edges, slots), TARGET]
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
            edge = find_edge(state, token, edges, slots)
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
        state = edges[find_edge(state, tokens[end + 1 + k], edges, slots), TARGET]
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
