"""How many of the index's continuation tokens to propose.

A verify step of 1 + n tokens costs ``cost(n + 1)`` single-token decodes and yields, in expectation,
``1 + sum_k P(first k draft tokens all accepted)`` tokens. The policy proposes the n that maximises
that ratio, and nothing when no n beats a plain step (ratio 1): on a compute-bound CPU a wrong draft
makes the step slower than plain decoding, on a GPU it is almost free.

P(token k accepted | tokens before it accepted) is estimated as ``agree[k] * reliability(L + k)``:
``agree`` is the index's own statistic (how often this context was followed by this token), and
``reliability`` is how often a match of that length was right before, calibrated online from the
accept/reject outcomes the decoder reports back through :meth:`DraftPolicy.observe`.
"""

from __future__ import annotations

import numpy as np

# Match lengths are bucketed; reliability is learnt per bucket. Bucket b holds lengths [2^b, 2^(b+1)).
N_BUCKETS = 8

# Prior belief, in pseudo-observations, that a match of length L predicts the next token:
# L / (L + PRIOR_SHAPE), worth PRIOR_WEIGHT observations. Short matches (2-3 tokens) in free text are
# right about half the time, long ones nearly always.
PRIOR_SHAPE = 1.5
PRIOR_WEIGHT = 4.0

# Verify cost of a batch of m tokens, in single-token decodes: 1 + slope * (m - 1). 0.45 is what a
# 135M model costs on 2 CPU cores (8 tokens ~ 4x one); memory-bound hardware is near 0.
DEFAULT_COST_SLOPE = 0.45


def _bucket(length: int) -> int:
    return min(N_BUCKETS - 1, max(0, int(length).bit_length() - 1))


class DraftPolicy:
    """Chooses draft length from match length, the index's agreement and the verify cost."""

    def __init__(self, cost_slope: float = DEFAULT_COST_SLOPE, min_match: int = 2):
        if cost_slope < 0:
            raise ValueError(f"cost_slope must be >= 0, got {cost_slope}")
        if min_match < 1:
            raise ValueError(f"min_match must be >= 1, got {min_match}")
        self.cost_slope = float(cost_slope)
        self.min_match = int(min_match)
        lengths = 2.0 ** np.arange(N_BUCKETS) * 1.5  # a representative length per bucket
        self._hits = PRIOR_WEIGHT * lengths / (lengths + PRIOR_SHAPE)
        self._trials = np.full(N_BUCKETS, PRIOR_WEIGHT)

    def reliability(self, length: int) -> float:
        b = _bucket(length)
        return float(self._hits[b] / self._trials[b])

    def cost(self, n_tokens: int) -> float:
        """Cost of decoding a batch of n_tokens, in single-token decodes."""
        return 1.0 + self.cost_slope * (n_tokens - 1)

    def choose(self, match_length: int, agree: np.ndarray) -> int:
        """Number of leading continuation tokens worth verifying (0 = draft nothing)."""
        if match_length < self.min_match:
            return 0
        best_n, best_rate = 0, 1.0  # a plain step: one token for one decode
        p_all = 1.0
        expected = 1.0  # the target's own token always comes out of a verify step
        for k in range(len(agree)):
            p_all *= float(agree[k]) * self.reliability(match_length + k)
            expected += p_all
            rate = expected / self.cost(k + 2)
            if rate > best_rate:
                best_n, best_rate = k + 1, rate
            if p_all < 0.05:  # later tokens cannot pay for themselves
                break
        return best_n

    def observe(self, match_length: int, drafted: int, accepted: int) -> None:
        """Record that `accepted` of `drafted` tokens proposed from a match of this length were kept."""
        # Token k was tried only if tokens before it were accepted; it was judged at length L + k.
        for k in range(min(drafted, accepted + 1)):
            b = _bucket(match_length + k)
            self._trials[b] += 1.0
            self._hits[b] += 1.0 if k < accepted else 0.0
