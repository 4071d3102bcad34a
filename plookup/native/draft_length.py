"""The draft-length decision of `plookup.draft.policy.DraftPolicy` as a numba kernel (it runs every step).

Expected tokens of a verify step that drafts n tokens: 1 + sum_{k<n} prod_{j<=k} q_j with
q_j = agree[j] * hits[b] / trials[b], b the reliability bucket of match length L + j. The kernel
returns the n maximising expected / cost(n + 1), 0 when none beats a plain step.

`best_two_branches` weighs verifying a second continuation beside the first in the same batch:
the branches share the draft up to the branch point k and are exclusive there (the target's token
at k is at most one of them), so their expected tokens add while the batch grows by both.

`size_batch_drafts` sizes the drafts of several sequences verified in one batch together.
"""

import numpy as np
from numba import njit


@njit(cache=True, inline="always")
def length_bucket(length, n_buckets):
    """Bucket b holds lengths [2^b, 2^(b+1)); the last bucket holds everything longer."""
    b = 0
    while length >= 2 and b < n_buckets - 1:
        length >>= 1
        b += 1
    return b


@njit(cache=True, inline="always")
def batch_cost(n_tokens, cost):
    """cost[n - 1], extrapolated linearly past the measured curve."""
    if n_tokens <= cost.size:
        return cost[n_tokens - 1]
    slope = (cost[-1] - 1.0) / max(1, cost.size - 1)
    return cost[-1] + slope * (n_tokens - cost.size)


@njit(cache=True)
def best_draft(match_length, agree, hits, trials, cost, min_prefix_probability):
    """(n, expected tokens per cost) of the best single draft; (0, 1.0) for none."""
    return _best_single(match_length, agree, hits, trials, cost, min_prefix_probability)


@njit(cache=True)
def prefix_probabilities(match_length, agree, hits, trials, min_prefix_probability):
    """p[k] = P(draft tokens 0..k all accepted) = prod_{j<=k} q_j, up to and including the first
    k where it drops below min_prefix_probability (no longer draft can pay)."""
    p = np.zeros(agree.size)
    p_all = 1.0
    for k in range(agree.size):
        b = length_bucket(match_length + k, hits.size)
        p_all *= agree[k] * hits[b] / trials[b]
        p[k] = p_all
        if p_all < min_prefix_probability:
            return p[: k + 1]
    return p


@njit(cache=True, inline="always")
def _best_single(match_length, agree, hits, trials, cost, min_prefix_probability):
    """(n, expected tokens per cost) of the best single-branch draft; (0, 1.0) for none."""
    best_n = 0
    best_rate = 1.0  # a plain step: one token for one decode
    expected = 1.0  # the target's own token always comes out of a verify step
    p = prefix_probabilities(match_length, agree, hits, trials, min_prefix_probability)
    for k in range(p.size):
        expected += p[k]
        rate = expected / batch_cost(k + 2, cost)
        if rate > best_rate:
            best_n = k + 1
            best_rate = rate
    return best_n, best_rate


@njit(cache=True)
def size_batch_drafts(probs, counts, cost, max_rows):
    """Draft lengths for m slots verified in one batch (one pending row each, then their drafts).

    probs[i, k]: slot i's chance that its draft tokens 0..k are all accepted (non-increasing in k),
    valid for k < counts[i]. A step of r rows costs cost(r) and emits, in expectation,
    m + sum of the probabilities of the draft tokens it verifies. Greedy on marginal gain: the
    next row goes to the slot whose next token is likeliest accepted; the answer is the prefix of
    that order with the best expected tokens per cost, none when no prefix beats drafting nothing
    (m tokens for cost(m)). With one slot that is :func:`best_draft`'s choice.
    """
    m = counts.size
    taken = np.zeros(m, dtype=np.int64)
    best = np.zeros(m, dtype=np.int64)
    rows = m
    expected = float(m)
    best_rate = expected / batch_cost(rows, cost)
    while rows < max_rows:
        pick, p_pick = -1, -1.0
        for i in range(m):
            if taken[i] < counts[i] and probs[i, taken[i]] > p_pick:
                pick, p_pick = i, probs[i, taken[i]]
        if pick < 0:
            break
        taken[pick] += 1
        rows += 1
        expected += p_pick
        rate = expected / batch_cost(rows, cost)
        if rate > best_rate:
            best_rate = rate
            best[:] = taken
    return best


@njit(cache=True, inline="always")
def _branch_gains(match_length, first, p_before, agree, hits, trials):
    """gains[j]: expected accepted tokens from the first j tokens of a branch whose tokens sit at
    draft positions first.. with agreement `agree`, reached with probability p_before."""
    gains = np.zeros(agree.size + 1)
    p_all = p_before
    for j in range(agree.size):
        b = length_bucket(match_length + first + j, hits.size)
        p_all *= agree[j] * hits[b] / trials[b]
        gains[j + 1] = gains[j] + p_all
    return gains


@njit(cache=True)
def best_two_branches(
    match_length, agree, branch_point, alt_agree, max_total, hits, trials, cost,
    min_prefix_probability,
):
    """(n_a, n_b): verify agree's draft[:n_a] and draft[:branch_point] + alt[:n_b] together, in a
    batch of 1 + n_a + n_b tokens, when that beats the best single-branch draft in expected tokens
    per cost; (0, 0) otherwise. Both branches must hold at least one token past the branch point.
    """
    _, single_rate = _best_single(match_length, agree, hits, trials, cost, min_prefix_probability)
    k = branch_point
    p_shared = 1.0
    shared = 1.0  # the target's own token, plus the shared draft tokens
    for j in range(k):
        b = length_bucket(match_length + j, hits.size)
        p_shared *= agree[j] * hits[b] / trials[b]
        shared += p_shared
    gains_a = _branch_gains(match_length, k, p_shared, agree[k:], hits, trials)
    gains_b = _branch_gains(match_length, k, p_shared, alt_agree, hits, trials)
    best_a, best_b, best_rate = 0, 0, single_rate
    for ja in range(1, gains_a.size):
        for jb in range(1, min(gains_b.size, max_total - k - ja + 1)):
            rate = (shared + gains_a[ja] + gains_b[jb]) / batch_cost(1 + k + ja + jb, cost)
            if rate > best_rate:
                best_a, best_b, best_rate = k + ja, jb, rate
    return best_a, best_b


@njit(cache=True)
def record_outcome(match_length, drafted, accepted, hits, trials):
    """Token k was judged only if the tokens before it were accepted, at match length L + k."""
    for k in range(min(drafted, accepted + 1)):
        b = length_bucket(match_length + k, hits.size)
        trials[b] += 1.0
        if k < accepted:
            hits[b] += 1.0


@njit(cache=True)
def equal_split_cost(rows, seqs, cost):
    """What a step costs in a cache with a KV stream per sequence: rows[i] rows on sequence
    seqs[i] (seqs increasing; the rows in that order, each sequence's together), split as
    llama.cpp's ``llama_batch_allocr::split_equal`` splits it. Each ubatch begins at the lowest
    sequence with rows left, takes the run of consecutive sequence ids from there that still have
    rows, and as many rows from each as the one with the fewest has left."""
    m = rows.size
    left = rows.copy()
    total = 0.0
    while True:
        start = 0
        while start < m and left[start] <= 0:
            start += 1
        if start == m:
            return total
        end = start + 1
        take = left[start]
        while end < m and left[end] > 0 and seqs[end] == seqs[end - 1] + 1:
            take = min(take, left[end])
            end += 1
        total += batch_cost(take * (end - start), cost)
        for i in range(start, end):
            left[i] -= take


@njit(cache=True, inline="always")
def _likeliest_first(gain_of, order):
    """The slots able to draft (gain_of[i] >= 0) into `order`, by gain descending, ties the
    higher index first; how many they are."""
    able = 0
    for i in range(gain_of.size):
        if gain_of[i] < 0.0:
            continue
        j = able
        while j > 0 and (gain_of[order[j - 1]] < gain_of[i] or (gain_of[order[j - 1]] == gain_of[i] and order[j - 1] < i)):
            order[j] = order[j - 1]
            j -= 1
        order[j] = i
        able += 1
    return able


@njit(cache=True)
def size_stream_drafts(probs, counts, seqs, yields, cost, max_rows):
    """Draft lengths for m slots verified in one step of a cache with a KV stream per slot, slot i
    on sequence seqs[i] (increasing) with its pending row, yields[i] tokens from it (1; 0 for a
    row the step adds that yields none: a gap filler, a prompt chunk counted as one row), and
    drafts of one length n on some of them: the step costs what :func:`equal_split_cost` says.
    probs[i, k] as for :func:`size_batch_drafts`; counts[i] = 0 where slot i drafts nothing.

    Weighed for each n: the k slots whose first n tokens are likeliest accepted (ties: the higher
    index first), and every run of neighbouring slots; the best expected tokens per cost wins,
    none when nothing beats the pending rows alone."""
    m = counts.size
    best = np.zeros(m, dtype=np.int64)
    rows = np.ones(m, dtype=np.int64)
    pending = yields.sum()
    best_rate = pending / equal_split_cost(rows, seqs, cost)
    gain_of = np.zeros(m)  # each slot's expected accepted tokens of a draft of n; -1: it has fewer
    order = np.zeros(m, dtype=np.int64)
    for n in range(1, counts.max() + 1):
        for i in range(m):
            gain_of[i] = gain_of[i] + probs[i, n - 1] if counts[i] >= n else -1.0
        # the likeliest k, then each run start..end-1 of neighbours
        able = _likeliest_first(gain_of, order)
        for start in range(-1, m):
            rows[:] = 1
            expected = pending
            for k in range(1, (able if start < 0 else m - start) + 1):
                i = order[k - 1] if start < 0 else start + k - 1
                if gain_of[i] < 0.0 or m + k * n > max_rows:
                    break
                rows[i] = 1 + n
                expected += gain_of[i]
                rate = expected / equal_split_cost(rows, seqs, cost)
                if rate > best_rate:
                    best_rate = rate
                    for j in range(m):
                        best[j] = rows[j] - 1
    return best
