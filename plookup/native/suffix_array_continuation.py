"""The greedy continuation of a suffix-array match: numba kernels over the text and suffix array of
:mod:`plookup.native.suffix_array` (a module of its own: matching finds where the context occurs,
this reads what follows those occurrences).

Continuing (:func:`corpus_lookup`): greedily, token by token, the most frequent next token among
the occurrences of the matched string (extended by the tokens chosen so far), ties to the smallest
id. A document end (SEP) counts as an occurrence that continues with no token; drafting stops where
no occurrence continues. Exact while at most SCAN occurrences are left (the usual case past a few
tokens) or at most two tokens follow; for more, see :func:`most_frequent_next` (sampled
candidates, exact counts).
"""

import numpy as np
from numba import njit

from .suffix_array import SCAN, SEP, longest_match

SAMPLES = 32


@njit(cache=True)
def _continue_few(text, follow, tokens, counts, agree):
    """The greedy continuation from the text positions `follow` (a copy: it is advanced), into
    tokens/counts/agree; returns how many tokens."""
    follow = follow.copy()
    live, previous, n = follow.size, follow.size, 0
    votes = np.empty(follow.size, np.int64)
    while n < tokens.size:
        best, best_count = -1, 0
        for k in range(live):
            votes[k] = text[follow[k]]
        for k in range(live):
            token = votes[k]
            if token == SEP or (best >= 0 and token == best):
                continue
            c = 0
            for m in range(live):
                c += votes[m] == token
            if c > best_count or (c == best_count and token < best):
                best, best_count = token, c
        if best < 0:
            break
        tokens[n], counts[n], agree[n] = best, best_count, best_count / previous
        kept = 0
        for k in range(live):
            if votes[k] == best:
                follow[kept] = follow[k] + 1
                kept += 1
        live, previous = kept, kept
        n += 1
    return n


@njit(cache=True, inline="always")
def _next(text, sa, i, depth):
    return text[sa[i] + depth]


@njit(cache=True)
def _run_end(text, sa, i, hi, depth, token):
    """First index in (i, hi] whose next token (at `depth`) is not `token`, by galloping;
    sa[i:hi]'s next tokens are sorted and text[sa[i] + depth] == token."""
    step = 1
    last = i  # known to hold `token`
    while last + step < hi and _next(text, sa, last + step, depth) == token:
        last += step
        step *= 2
    lo, top = last + 1, min(last + step, hi)
    while lo < top:
        mid = (lo + top) >> 1
        if _next(text, sa, mid, depth) == token:
            lo = mid + 1
        else:
            top = mid
    return lo


@njit(cache=True)
def _run_start(text, sa, lo, i, depth, token):
    """First index in [lo, i] whose next token is `token`, by galloping back from i
    (text[sa[i] + depth] == token)."""
    step, first = 1, i  # known to hold `token`
    while first - step >= lo and _next(text, sa, first - step, depth) == token:
        first -= step
        step *= 2
    bottom = max(lo, first - step + 1)
    while bottom < first:
        mid = (bottom + first) >> 1
        if _next(text, sa, mid, depth) < token:
            bottom = mid + 1
        else:
            first = mid
    return bottom


@njit(cache=True)
def most_frequent_next(text, sa, lo, hi, depth):
    """(token, run_lo, run_hi): the most frequent token at `depth` after the suffixes sa[lo:hi]
    (ties: the smallest) and the suffixes it follows; (-1, lo, lo) when none continues (all are
    document ends, which sort last). Exact for at most SCAN continuing suffixes; beyond, the two
    tokens seen most often at SAMPLES evenly spaced places (the first and the last included) are
    counted exactly and the more frequent taken: exact when at most two tokens follow."""
    best, best_lo, best_hi = -1, lo, lo
    top = hi
    if lo < hi and _next(text, sa, hi - 1, depth) == SEP:
        top = _run_start(text, sa, lo, hi - 1, depth, SEP)
    if top - lo <= SCAN:  # few: read them all (independent loads, no galloping)
        i = lo
        while i < top:
            token = _next(text, sa, i, depth)
            j = i + 1
            while j < top and _next(text, sa, j, depth) == token:
                j += 1
            if j - i > best_hi - best_lo:
                best, best_lo, best_hi = token, i, j
            i = j
        return best, best_lo, best_hi
    span = top - lo
    first, first_seen, first_at = -1, 0, lo  # the two tokens sampled most often (ties: smaller)
    second, second_seen, second_at = -1, 0, lo
    previous, seen = -1, 0
    for s in range(SAMPLES + 1):
        token = _next(text, sa, lo + (s * (span - 1)) // (SAMPLES - 1), depth) if s < SAMPLES else -1
        if token == previous:
            seen += 1
            continue
        if previous >= 0:  # the samples of `previous` end here
            at = lo + ((s - 1) * (span - 1)) // (SAMPLES - 1)
            if seen > first_seen:
                second, second_seen, second_at = first, first_seen, first_at
                first, first_seen, first_at = previous, seen, at
            elif seen > second_seen:
                second, second_seen, second_at = previous, seen, at
        previous, seen = token, 1
    for token, at in ((first, first_at), (second, second_at)):
        if token < 0:
            continue
        start = _run_start(text, sa, lo, at, depth, token)
        end = _run_end(text, sa, at, top, depth, token)
        if end - start > best_hi - best_lo or (end - start == best_hi - best_lo and token < best):
            best, best_lo, best_hi = token, start, end
    return best, best_lo, best_hi


@njit(cache=True)
def corpus_lookup(text, sa, starts, context, max_match, max_draft):
    """(length, count, tokens, counts, agree) for the longest match of `context`'s suffix:
    `count` occurrences of it, then up to `max_draft` greedy continuation tokens, for each the
    occurrences still followed (`counts`, int64) and that over the previous count (`agree`)."""
    tokens = np.empty(max(max_draft, 0), np.int32)
    counts = np.empty(max(max_draft, 0), np.int64)
    agree = np.empty(max(max_draft, 0), np.float64)
    length, lo, hi, follow = longest_match(text, sa, starts, context, max_match)
    if length == 0:
        return 0, 0, tokens[:0], counts[:0], agree[:0]
    if follow.size:
        n = _continue_few(text, follow, tokens, counts, agree)
        return length, follow.size, tokens[:n], counts[:n], agree[:n]
    count, n = hi - lo, 0
    depth, previous = length, hi - lo
    while n < max_draft:
        token, lo, hi = most_frequent_next(text, sa, lo, hi, depth)
        if token < 0:
            break
        tokens[n], counts[n], agree[n] = token, hi - lo, (hi - lo) / previous
        previous = hi - lo
        depth += 1
        n += 1
    return length, count, tokens[:n], counts[:n], agree[:n]
