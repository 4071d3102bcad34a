"""How many of the index's continuation tokens to propose.

A verify step of 1 + n tokens costs ``cost(n + 1)`` single-token decodes and yields, in expectation,
``1 + sum_k P(first k draft tokens all accepted)`` tokens. The policy proposes the n that maximises
that ratio, and nothing when no n beats a plain step (ratio 1): on a compute-bound CPU a wrong draft
makes the step slower than plain decoding, on a GPU it is almost free.

``cost`` is the verify-cost curve of the model on this machine (see :mod:`plookup.costs`;
``plookup.Llama`` measures it once and caches it). Until one is given, a curve measured for a
135M model on 2 CPU cores stands in.

P(token k accepted | tokens before it accepted) is estimated as ``agree[k] * reliability(L + k)``:
``agree`` is the index's own statistic (how often this context was followed by this token), and
``reliability`` is how often a match of that length was right before in this request, calibrated
online from the accept/reject outcomes the decoder reports back through :meth:`DraftPolicy.observe`.

Under sampling a draft token that is the model's most likely one is accepted only when the sample
is that token too. Before a request has outcomes of its own, the prior's reliability is scaled by
how often the request's samples so far were the most likely token (:meth:`observe_sampling`, from
every sampled token, drafted or not), so that at a high temperature the first drafts are not
sized for greedy decoding.
"""

from __future__ import annotations

import numpy as np

from .native.draft_length import (
    best_draft_length,
    best_two_branches,
    length_bucket,
    prefix_probabilities,
    record_outcome,
    size_batch_drafts,
)

# Match lengths are bucketed; reliability is learnt per bucket. Bucket b holds lengths [2^b, 2^(b+1)).
N_BUCKETS = 8

# Prior belief, in pseudo-observations, that a match of length L predicts the next token:
# L / (L + PRIOR_SHAPE), worth PRIOR_WEIGHT observations. Short matches (2-3 tokens) in free text are
# right about half the time, long ones nearly always.
PRIOR_SHAPE = 1.5
PRIOR_WEIGHT = 4.0
_BUCKET_LENGTHS = 2.0 ** np.arange(N_BUCKETS) * 1.5  # a representative length per bucket
PRIOR_HITS = PRIOR_WEIGHT * _BUCKET_LENGTHS / (_BUCKET_LENGTHS + PRIOR_SHAPE)

# cost[n - 1]: one decode of n tokens, in single-token decodes. SmolLM2-135M Q4_1, 2 CPU cores.
CPU_COST_CURVE = np.array(
    [1.0, 1.75, 2.13, 2.48, 3.11, 3.54, 3.93, 4.09, 4.69, 5.5, 5.86, 6.06, 6.46, 6.72, 7.06, 7.26]
)

# Once the chance that every draft token so far is right drops below this, longer drafts cannot pay.
MIN_PREFIX_PROBABILITY = 0.05

# Prior belief, in pseudo-samples, that a sample is the most likely token (greedy decoding's case).
SAMPLING_PRIOR_WEIGHT = 2.0


def validate_cost_curve(cost) -> np.ndarray:
    cost = np.asarray(cost, dtype=np.float64)
    if cost.ndim != 1 or len(cost) < 1 or not np.all(np.isfinite(cost)) or np.any(cost <= 0):
        raise ValueError("a cost curve is a non-empty 1-D array of positive relative decode costs")
    return cost / cost[0]


class DraftPolicy:
    """Chooses draft length from match length, the index's agreement and the verify cost."""

    def __init__(self, min_match: int = 2, cost=CPU_COST_CURVE):
        if min_match < 1:
            raise ValueError(f"min_match must be >= 1, got {min_match}")
        self.min_match = int(min_match)
        self.cost = validate_cost_curve(cost)
        self.start_request()

    def start_request(self) -> None:
        """Go back to the prior: each request calibrates on its own outcomes (a code edit and a
        free-form answer that follows it on the same model accept drafts at very different rates)."""
        self._hits = np.zeros(N_BUCKETS)  # accepted draft tokens per bucket, this request
        self._trials = np.zeros(N_BUCKETS)  # judged draft tokens per bucket, this request
        self._samples = 0  # tokens sampled at temperature > 0, this request
        self._samples_most_likely = 0  # of which the model's most likely token

    def calibration(self) -> tuple[np.ndarray, np.ndarray]:
        """(hits, trials) per bucket: the prior's pseudo-observations, scaled by the sampling
        agreement, plus this request's outcomes; reliability is their ratio."""
        agreement = (SAMPLING_PRIOR_WEIGHT + self._samples_most_likely) / (
            SAMPLING_PRIOR_WEIGHT + self._samples
        )
        return PRIOR_HITS * agreement + self._hits, PRIOR_WEIGHT + self._trials

    def reliability(self, length: int) -> float:
        hits, trials = self.calibration()
        b = length_bucket(length, N_BUCKETS)
        return float(hits[b] / trials[b])

    def choose(self, match_length: int, agree: np.ndarray) -> int:
        """Number of leading continuation tokens worth verifying (0 = draft nothing)."""
        if match_length < self.min_match:
            return 0
        hits, trials = self.calibration()
        return best_draft_length(match_length, agree, hits, trials, self.cost, MIN_PREFIX_PROBABILITY)

    def prefix_probabilities(self, match_length: int, agree: np.ndarray) -> np.ndarray:
        """p[k]: the chance that draft tokens 0..k are all accepted, as :meth:`choose` weighs them
        (cut after the first below MIN_PREFIX_PROBABILITY); empty below min_match."""
        if match_length < self.min_match:
            return np.zeros(0)
        hits, trials = self.calibration()
        return prefix_probabilities(match_length, agree, hits, trials, MIN_PREFIX_PROBABILITY)

    def choose_branches(
        self, match_length: int, agree: np.ndarray, branch_point: int, alt_agree: np.ndarray,
        max_total: int,
    ) -> tuple[int, int]:  # fmt: skip
        """(n_a, n_b): verify draft[:n_a] and, beside it in the same batch, the alternative
        branch draft[:branch_point] + alt[:n_b] (at most max_total draft tokens in all), when
        that beats the best single draft in expected tokens per cost; (0, 0) otherwise.

        The branches are exclusive at the branch point, so the expected tokens of the two add:
        the shared prefix's, then each branch's agreement × reliability products.
        """
        if match_length < self.min_match or alt_agree.size == 0:
            return 0, 0
        hits, trials = self.calibration()
        n_a, n_b = best_two_branches(
            match_length, agree, branch_point, alt_agree, max_total, hits, trials, self.cost,
            MIN_PREFIX_PROBABILITY,
        )  # fmt: skip
        return int(n_a), int(n_b)

    def observe(self, match_length: int, drafted: int, accepted: int) -> None:
        """Record that `accepted` of `drafted` tokens proposed from a match of this length were kept."""
        record_outcome(match_length, drafted, accepted, self._hits, self._trials)

    def observe_sampling(self, samples: int, most_likely: int) -> None:
        """Record that `most_likely` of `samples` tokens sampled at temperature > 0 were the
        model's most likely token (greedy decoding reports nothing: it always is)."""
        self._samples += samples
        self._samples_most_likely += most_likely


def size_batch(probabilities: list[np.ndarray], cost: np.ndarray, max_rows: int) -> list[int]:
    """Draft lengths for sequences verified in one batch of at most `max_rows` rows, each with
    its pending token: ``probabilities[i]`` is sequence i's :meth:`DraftPolicy.prefix_probabilities`.
    The lengths maximise expected tokens per cost of the whole step (see
    :func:`plookup.native.draft_length.size_batch_drafts`): a busy batch drafts less, and a lone
    sequence drafts what :meth:`DraftPolicy.choose` would."""
    m = len(probabilities)
    counts = np.array([len(p) for p in probabilities], dtype=np.int64)
    table = np.zeros((m, max(1, int(counts.max(initial=0)))))
    for i, p in enumerate(probabilities):
        table[i, : len(p)] = p
    return size_batch_drafts(table, counts, validate_cost_curve(cost), int(max_rows)).tolist()
