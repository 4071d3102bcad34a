"""The draft-length decision of `plookup.policy.DraftPolicy` as a numba kernel (it runs every step).

Expected tokens of a verify step that drafts n tokens: 1 + sum_{k<n} prod_{j<=k} q_j with
q_j = agree[j] * hits[b] / trials[b], b the reliability bucket of match length L + j. The kernel
returns the n maximising expected / cost(n + 1), 0 when none beats a plain step.
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
def best_draft_length(match_length, agree, hits, trials, cost, min_prefix_probability):
    best_n = 0
    best_rate = 1.0  # a plain step: one token for one decode
    p_all = 1.0
    expected = 1.0  # the target's own token always comes out of a verify step
    for k in range(agree.size):
        b = length_bucket(match_length + k, hits.size)
        p_all *= agree[k] * hits[b] / trials[b]
        expected += p_all
        rate = expected / batch_cost(k + 2, cost)
        if rate > best_rate:
            best_n = k + 1
            best_rate = rate
        if p_all < min_prefix_probability:
            break
    return best_n


@njit(cache=True)
def record_outcome(match_length, drafted, accepted, hits, trials):
    """Token k was judged only if the tokens before it were accepted, at match length L + k."""
    for k in range(min(drafted, accepted + 1)):
        b = length_bucket(match_length + k, hits.size)
        trials[b] += 1.0
        if k < accepted:
            hits[b] += 1.0
