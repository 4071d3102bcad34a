"""A static suffix array over int32 tokens: built with numpy, queried by numba kernels.

The text is ``doc_0 SEP doc_1 SEP ... doc_k SEP`` (SEP = 2**31 - 1, never a vocabulary id) and
the suffix array ``sa`` (int32) holds the positions of its non-SEP tokens, ordered by the suffixes
that start there, compared up to their first SEP. Tokens + suffix array: 8 bytes per corpus token,
plus 4 per document (its SEP).

- Building (:func:`build_suffix_array`): prefix doubling (Manber-Myers) with numpy argsorts, each
  round re-sorting only the positions whose group is not yet a single suffix (Larsson-Sadakane's
  idea), so a round costs what is still tied. Each separator sorts as a token of its own (above
  every vocabulary id), so no comparison runs past a document end and the number of rounds is
  log2 of the longest repeat inside a document.
- Matching (:func:`longest_match`): the longest suffix of the context (at most ``max_match``
  tokens) that occurs in the text. A suffix of an occurring string occurs, so lengths 1, 2, 4, ...
  are probed, then bisected; each probe is a binary search inside the range of its first token
  (``starts``, from :func:`first_token_starts`). Once at most SCAN suffixes match, the rest is
  read off the text: how far back each of those few occurrences goes on matching. Context tokens
  outside [0, 2**31 - 2] match nothing: only the tokens after the last such one are used.
- Continuing (:func:`corpus_lookup`): greedily, token by token, the most frequent next token among
  the occurrences of the matched string (extended by the tokens chosen so far), ties to the
  smallest id. A document end (SEP) counts as an occurrence that continues with no token; drafting
  stops where no occurrence continues. Exact while at most SCAN occurrences are left (the usual
  case past a few tokens) or at most two tokens follow; for more, see :func:`most_frequent_next`
  (sampled candidates, exact counts).

No kernel allocates beyond its small result arrays, and none checks ``sa`` against the text: the
caller (:class:`plookup.index.corpus.CorpusIndex`) validates both once, at load.
"""

import numpy as np
from numba import njit

SEP = 2**31 - 1
SCAN = 32
SAMPLES = 32


def build_suffix_array(text: np.ndarray) -> np.ndarray:
    """int32 positions of `text`'s non-SEP tokens in suffix order (see the module docstring).

    `text` must be empty or end with SEP."""
    n = int(text.size)
    if n == 0:
        return np.zeros(0, np.int32)
    if int(text[-1]) != SEP:
        raise ValueError("the text must end with a separator")
    keys = text.astype(np.int64)
    seps = np.flatnonzero(keys == SEP)
    keys[seps] = SEP + np.arange(seps.size, dtype=np.int64)  # one symbol per document end
    sa = np.argsort(keys, kind="stable")
    sorted_keys = keys[sa]
    slots = np.arange(n, dtype=np.int64)
    starts = np.ones(n, dtype=bool)
    starts[1:] = sorted_keys[1:] != sorted_keys[:-1]
    group = np.maximum.accumulate(np.where(starts, slots, 0))  # per slot: its group's first slot
    rank = np.empty(n, np.int64)
    rank[sa] = group
    active = _tied(starts)
    k = 1
    while active.size:
        positions = sa[active]
        after = positions + k
        second = np.where(after < n, rank[np.minimum(after, n - 1)] + 1, 0)
        key = group[active] * (n + 1) + second
        order = np.argsort(key, kind="stable")
        positions, key = positions[order], key[order]
        sa[active] = positions  # a group's members fill the group's own slots
        run_starts = np.ones(active.size, dtype=bool)
        run_starts[1:] = key[1:] != key[:-1]
        new_group = np.maximum.accumulate(np.where(run_starts, active, 0))
        group[active] = new_group
        rank[positions] = new_group
        active = active[_tied(run_starts)]
        k *= 2
    return sa[text[sa] != SEP].astype(np.int32)


def _tied(starts: np.ndarray) -> np.ndarray:
    """Indices of the members of runs longer than one, given each run's first index marked."""
    ends = np.ones(starts.size, dtype=bool)
    ends[:-1] = starts[1:]
    return np.flatnonzero(~(starts & ends))


@njit(cache=True, inline="always")
def _compare(text, start, context, begin, end):
    """-1 / 0 / +1: the suffix at `start` sorts before / has as prefix / sorts after
    context[begin:end] (which holds no SEP, so the scan stops before the text ends)."""
    for i in range(end - begin):
        a = text[start + i]
        b = context[begin + i]
        if a != b:
            return -1 if a < b else 1
    return 0


@njit(cache=True)
def _lower(text, sa, lo, hi, context, begin, end, skip):
    """First index in [lo, hi) whose suffix, less its first `skip` tokens (known equal), does
    not sort before context[begin:end]."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if _compare(text, sa[mid] + skip, context, begin, end) < 0:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True)
def _upper(text, sa, lo, hi, context, begin, end, skip):
    """First index in [lo, hi) whose suffix, less its first `skip` tokens, sorts after
    context[begin:end] (having it as a prefix counts as equal)."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if _compare(text, sa[mid] + skip, context, begin, end) <= 0:
            lo = mid + 1
        else:
            hi = mid
    return lo


def first_token_starts(text: np.ndarray) -> np.ndarray:
    """int32[V + 1] for V = the largest corpus token + 1: the suffixes that start with token t are
    sa[starts[t]:starts[t + 1]] (each probe of a match searches only there)."""
    tokens = text[text != SEP]
    counts = np.bincount(tokens) if tokens.size else np.zeros(0, np.int64)
    starts = np.zeros(counts.size + 1, np.int32)
    np.cumsum(counts, out=starts[1:])
    return starts


@njit(cache=True)
def _range(text, sa, starts, context, begin, end):
    """(lo, hi): the suffixes sa[lo:hi] that start with context[begin:end] (lo == hi: none)."""
    first = context[begin]
    if first >= starts.size - 1:
        return 0, 0
    lo, hi = starts[first], starts[first + 1]
    if end - begin == 1 or lo == hi:
        return lo, hi
    lo = _lower(text, sa, lo, hi, context, begin + 1, end, 1)
    if lo == hi or _compare(text, sa[lo] + 1, context, begin + 1, end) != 0:
        return lo, lo
    step = 1  # gallop to the end of the matches: few, usually, in a large first-token range
    while lo + step < hi and _compare(text, sa[lo + step] + 1, context, begin + 1, end) == 0:
        step *= 2
    return lo, _upper(text, sa, lo + step // 2, min(lo + step, hi), context, begin + 1, end, 1)


@njit(cache=True)
def longest_match(text, sa, starts, context, max_match):
    """(length, lo, hi, follow): the longest suffix of `context` (at most `max_match` tokens, none
    outside [0, 2**31 - 2]) that occurs in the text; length 0 when none does.

    Probes lengths 1, 2, 4, ... until one fails or at most SCAN suffixes match, then bisects while
    more than SCAN match. The occurrences are then sa[lo:hi] (``follow`` empty), or, once they are
    few, ``follow``: the text position after each occurrence of the whole match, found by reading
    the text backwards from the few occurrences of the shorter match sa[lo:hi] (every occurrence
    of a longer suffix ends in one of them)."""
    end = context.size
    begin = max(0, end - max_match)
    for i in range(end - 1, begin - 1, -1):
        if context[i] < 0 or context[i] >= SEP:
            begin = i + 1
            break
    longest = end - begin
    good, good_lo, good_hi, bad = 0, 0, 0, longest + 1  # a length that occurs, one that does not
    probe = 1
    while probe <= longest:
        lo, hi = _range(text, sa, starts, context, end - probe, end)
        if lo == hi:
            bad = probe
            break
        good, good_lo, good_hi = probe, lo, hi
        if hi - lo <= SCAN or probe == longest:
            break
        probe = min(2 * probe, longest)
    while bad - good > 1 and good_hi - good_lo > SCAN:
        mid = (good + bad) >> 1
        lo, hi = _range(text, sa, starts, context, end - mid, end)
        if lo < hi:
            good, good_lo, good_hi = mid, lo, hi
        else:
            bad = mid
    if good == 0 or good_hi - good_lo > SCAN:
        return good, good_lo, good_hi, np.empty(0, np.int64)
    size = good_hi - good_lo
    back = np.empty(size, np.int64)
    most = 0
    for k in range(size):  # how much further back each occurrence goes on matching
        p, j = sa[good_lo + k], 0
        while good + j < bad - 1 and p - j > 0 and text[p - j - 1] == context[end - good - j - 1]:
            j += 1  # (a SEP never equals a context token: no match crosses a document start)
        back[k] = j
        most = max(most, j)
    follow = np.empty(size, np.int64)
    n = 0
    for k in range(size):
        if back[k] == most:
            follow[n] = sa[good_lo + k] + good
            n += 1
    return good + most, good_lo, good_hi, follow[:n]


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
