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
- Continuing (:func:`plookup.native.suffix_array_continuation.corpus_lookup`): greedily, token by
  token, the most frequent next token among the occurrences of the match (see that module).

No kernel allocates beyond its small result arrays, and none checks ``sa`` against the text: the
caller (:class:`plookup.index.corpus.CorpusIndex`) validates both once, at load.
"""

import numpy as np
from numba import njit

SEP = 2**31 - 1
SCAN = 32


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
