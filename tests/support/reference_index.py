"""Brute-force answers for SuffixIndex and NgramIndex, straight from the definitions.

Quadratic and slow; only for checking the kernels on short histories.
"""

from __future__ import annotations


def _ends_of(history: list[int], pattern: list[int], last_end: int) -> list[int]:
    """End indices e <= last_end of the (possibly overlapping) occurrences of pattern."""
    size = len(pattern)
    return [
        e for e in range(size - 1, last_end + 1) if history[e - size + 1 : e + 1] == pattern
    ]


def suffix_match(history: list[int]) -> tuple[int, int, int]:
    """(L, e, count): longest suffix also ending at some e < n - 1, latest such e, how many."""
    n = len(history)
    candidates = list(range(n - 1))  # earlier ends whose text matches the suffix so far
    length = 0
    while True:
        grown = [
            e
            for e in candidates
            if e - length >= 0 and history[e - length] == history[n - 1 - length]
        ]
        if not grown:
            break
        candidates = grown
        length += 1
    if length == 0:
        return 0, -1, 0
    return length, max(candidates), len(candidates)


def suffix_continuation(history: list[int], max_len: int) -> tuple[list[int], list[float]]:
    """(draft, agree) as specified for SuffixIndex.continuation."""
    n = len(history)
    length, end, _ = suffix_match(history)
    draft: list[int] = []
    agree: list[float] = []
    if length < 1:
        return draft, agree
    context = history[end - length + 1 : end + 1]
    while len(draft) < max_len and end + 1 + len(draft) <= n - 1:
        token = history[end + 1 + len(draft)]
        followable = len(_ends_of(history, context, n - 2))
        context = context + [token]
        agree.append(len(_ends_of(history, context, n - 1)) / followable)
        draft.append(token)
    return draft, agree


def ngram_lookup(history: list[int], n: int) -> tuple[int, int]:
    """(latest end, count) of earlier occurrences of the last n tokens; (-1, 0) if none."""
    if len(history) < n:
        return -1, 0
    ends = _ends_of(history, history[-n:], len(history) - 2)
    return (max(ends), len(ends)) if ends else (-1, 0)


def ngram_match(history: list[int], n_min: int, n_max: int) -> tuple[int, int, int]:
    for n in range(n_max, n_min - 1, -1):
        end, count = ngram_lookup(history, n)
        if count:
            return n, end, count
    return 0, -1, 0
