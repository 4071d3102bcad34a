"""How many of the index's continuation tokens to propose.

A verify step of 1 + n tokens costs ``cost(n + 1)`` single-token decodes and yields, in expectation,
``1 + sum_k P(first k draft tokens all accepted)`` tokens. The policy proposes the n that maximises
that ratio, and nothing when no n beats a plain step (ratio 1): on a compute-bound CPU a wrong draft
makes the step slower than plain decoding, on a GPU it is almost free.

``cost`` is the verify-cost curve of the model on this machine (see :mod:`plookup.measure.costs`;
``plookup.Llama`` measures it once and caches it). Until one is given, a curve measured for a
135M model on 2 CPU cores stands in.

P(token k accepted | tokens before it accepted) is estimated as ``agree[k] * reliability(L + k)``:
``agree`` is the index's own statistic (how often this context was followed by this token), and
``reliability`` is how often a match of that length was right before in this request, calibrated
online from the accept/reject outcomes the decoder reports back through :meth:`DraftPolicy.observe`,
from a fixed prior that comes down where the model's earlier requests' greedy drafts went astray
(:class:`PastOutcomes`).

Under sampling a draft token that is the model's most likely one is accepted only when the sample
is that token too. Before a request has outcomes of its own, the prior's reliability is scaled by
how often the request's samples so far were the most likely token (:meth:`observe_sampling`, from
every sampled token, drafted or not), so that at a high temperature the first drafts are not
sized for greedy decoding.

Each source of drafts is calibrated on its own outcomes (``source=`` of :meth:`DraftPolicy.choose`
and the others): the request's own index, its prediction and the cross-request memory share one
calibration (the prediction is text the request is expected to copy, the memory holds the same
user's earlier requests, which are copied as readily), a static corpus
(:mod:`plookup.index.corpus`) has another, with a more pessimistic prior: a match in the user's other
files says less about what this request writes next than a match in its own text.
"""

from __future__ import annotations

import numpy as np

from ..native.draft_length import (
    best_draft,
    best_two_branches,
    length_bucket,
    prefix_probabilities,
    record_outcome,
)
from .values import CORPUS, REQUEST

# Match lengths are bucketed; reliability is learnt per bucket. Bucket b holds lengths [2^b, 2^(b+1)).
N_BUCKETS = 8

# Prior belief, in pseudo-observations, that a match of length L predicts the next token:
# L / (L + PRIOR_SHAPE), worth PRIOR_WEIGHT observations. Short matches (2-3 tokens) in free text are
# right about half the time, long ones nearly always.
PRIOR_SHAPE = 1.5
PRIOR_WEIGHT = 4.0
_BUCKET_LENGTHS = 2.0 ** np.arange(N_BUCKETS) * 1.5  # a representative length per bucket
PRIOR_HITS = PRIOR_WEIGHT * _BUCKET_LENGTHS / (_BUCKET_LENGTHS + PRIOR_SHAPE)
# The corpus's prior: L / (L + CORPUS_PRIOR_SHAPE), as many pseudo-observations. A corpus match of L
# tokens is trusted like a request match of L / 4: text in other files of the project or its
# libraries goes on differently far more often than the request's own text, which an edit copies.
# By bucket: 0.2, 0.33, 0.5, 0.67, 0.8, 0.89 (lengths 1.5 to 48), so on a CPU a corpus match drafts
# (a few tokens) from about 16 tokens on, until this request's outcomes say otherwise.
CORPUS_PRIOR_SHAPE = 6.0
CORPUS_PRIOR_HITS = PRIOR_WEIGHT * _BUCKET_LENGTHS / (_BUCKET_LENGTHS + CORPUS_PRIOR_SHAPE)

# cost[n - 1]: one decode of n tokens, in single-token decodes. SmolLM2-135M Q4_1, 2 CPU cores.
CPU_COST_CURVE = np.array(
    [1.0, 1.75, 2.13, 2.48, 3.11, 3.54, 3.93, 4.09, 4.69, 5.5, 5.86, 6.06, 6.46, 6.72, 7.06, 7.26]
)

# Once the chance that every draft token so far is right drops below this, longer drafts cannot pay.
MIN_PREFIX_PROBABILITY = 0.05

# Prior belief, in pseudo-samples, that a sample is the most likely token (greedy decoding's case).
SAMPLING_PRIOR_WEIGHT = 2.0

# The earlier requests' judged draft tokens a bucket remembers, older ones fading: where a new
# request's prior comes down from (PastOutcomes).
PAST_TRIALS = 32.0


def validate_cost_curve(cost) -> np.ndarray:
    cost = np.asarray(cost, dtype=np.float64)
    if cost.ndim != 1 or len(cost) < 1 or not np.all(np.isfinite(cost)) or np.any(cost <= 0):
        raise ValueError("a cost curve is a non-empty 1-D array of positive relative decode costs")
    return cost / cost[0]


class PastOutcomes:
    """The draft outcomes of the requests a model served, per source and bucket, the last
    PAST_TRIALS judged tokens of each bucket counting (older ones fade): how far a new request's
    prior comes down. The fixed prior says a match of 4-7 tokens is right 4 times in 5; on free
    text such drafts are mostly wrong, and a request of 128 tokens drafts once or twice, too few to
    learn it alone. Shared by the drafters of one model's slots."""

    def __init__(self):
        self.clear()

    def clear(self) -> None:
        self.hits = {REQUEST: np.zeros(N_BUCKETS), CORPUS: np.zeros(N_BUCKETS)}
        self.trials = {REQUEST: np.zeros(N_BUCKETS), CORPUS: np.zeros(N_BUCKETS)}

    def record(self, source: str, match_length: int, drafted: int, accepted: int) -> None:
        hits, trials = self.hits[source], self.trials[source]
        record_outcome(match_length, drafted, accepted, hits, trials)
        fade = np.minimum(1.0, PAST_TRIALS / np.maximum(trials, 1.0))
        hits *= fade
        trials *= fade

    def prior(self, source: str, fixed: np.ndarray) -> np.ndarray:
        """PRIOR_WEIGHT pseudo-observations per bucket, at the rate of the fixed prior's (`fixed`,
        hits of PRIOR_WEIGHT) and the past outcomes together where that is lower; the fixed
        prior's where the past says more: a request's first drafts meet its own edits, which the
        earlier requests' kept drafts do not foresee: a prior raised by the past drafted longer and
        kept less (docs/lab/notebook.md, "A new request's prior from the earlier requests' outcomes")."""
        leaned = PRIOR_WEIGHT * (fixed + self.hits[source]) / (PRIOR_WEIGHT + self.trials[source])
        return np.minimum(fixed, leaned)


class DraftPolicy:
    """Chooses draft length from match length, the index's agreement and the verify cost.
    `past`: the outcomes of the model's earlier requests (shared by its slots' policies)."""

    def __init__(self, min_match: int = 2, cost=CPU_COST_CURVE, past: PastOutcomes | None = None):
        if min_match < 1:
            raise ValueError(f"min_match must be >= 1, got {min_match}")
        self.min_match = int(min_match)
        self.cost = validate_cost_curve(cost)
        self.past = PastOutcomes() if past is None else past
        self.start_request()

    def start_request(self) -> None:
        """Go back to the prior: each request calibrates on its own outcomes (a code edit and a
        free-form answer that follows it on the same model accept drafts at very different rates),
        from a prior that comes down where the earlier requests' drafts went astray
        (:class:`PastOutcomes`)."""
        self._hits = np.zeros(N_BUCKETS)  # accepted draft tokens per bucket, this request
        self._trials = np.zeros(N_BUCKETS)  # judged draft tokens per bucket, this request
        self._corpus_hits = np.zeros(N_BUCKETS)  # the same for drafts from the corpus
        self._corpus_trials = np.zeros(N_BUCKETS)
        self._samples = 0  # tokens sampled at temperature > 0, this request
        self._samples_most_likely = 0  # of which the model's most likely token

    def _outcomes(self, source: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(prior hits, hits, trials) of `source`'s calibration (the prediction and the memory share
        the request's)."""
        kind = CORPUS if source == CORPUS else REQUEST
        return self.past.prior(kind, CORPUS_PRIOR_HITS if kind == CORPUS else PRIOR_HITS), *self._own(kind)

    def _own(self, kind: str) -> tuple[np.ndarray, np.ndarray]:
        """(hits, trials) of this request's drafts from a calibration's `kind` (REQUEST or CORPUS)."""
        return (self._corpus_hits, self._corpus_trials) if kind == CORPUS else (self._hits, self._trials)

    def calibration(self, source: str = REQUEST) -> tuple[np.ndarray, np.ndarray]:
        """(hits, trials) per bucket for drafts from `source`: its prior's pseudo-observations,
        scaled by the sampling agreement, plus this request's outcomes; reliability is their ratio."""
        agreement = (SAMPLING_PRIOR_WEIGHT + self._samples_most_likely) / (
            SAMPLING_PRIOR_WEIGHT + self._samples
        )
        prior, hits, trials = self._outcomes(source)
        return prior * agreement + hits, PRIOR_WEIGHT + trials

    def reliability(self, length: int, source: str = REQUEST) -> float:
        hits, trials = self.calibration(source)
        b = length_bucket(length, N_BUCKETS)
        return float(hits[b] / trials[b])

    def choose(self, match_length: int, agree: np.ndarray, source: str = REQUEST) -> int:
        """Number of leading continuation tokens worth verifying (0 = draft nothing)."""
        if match_length < self.min_match:
            return 0
        hits, trials = self.calibration(source)
        return int(best_draft(match_length, agree, hits, trials, self.cost, MIN_PREFIX_PROBABILITY)[0])

    def prefix_probabilities(self, match_length: int, agree: np.ndarray, source: str = REQUEST) -> np.ndarray:
        """p[k]: the chance that draft tokens 0..k are all accepted, as :meth:`choose` weighs them
        (cut after the first below MIN_PREFIX_PROBABILITY); empty below min_match."""
        if match_length < self.min_match:
            return np.zeros(0)
        hits, trials = self.calibration(source)
        return prefix_probabilities(match_length, agree, hits, trials, MIN_PREFIX_PROBABILITY)

    def value(self, match_length: int, agree: np.ndarray, source: str = REQUEST) -> float:
        """Expected tokens per verify cost of the draft :meth:`choose` would send (1.0: a plain
        step, nothing drafted): what one source's candidate is weighed by against another's."""
        if match_length < self.min_match:
            return 1.0
        hits, trials = self.calibration(source)
        return float(best_draft(match_length, agree, hits, trials, self.cost, MIN_PREFIX_PROBABILITY)[1])

    def choose_branches(
        self, match_length: int, agree: np.ndarray, branch_point: int, alt_agree: np.ndarray,
        max_total: int, source: str = REQUEST,
    ) -> tuple[int, int]:
        """(n_a, n_b): verify draft[:n_a] and, beside it in the same batch, the alternative
        branch draft[:branch_point] + alt[:n_b] (at most max_total draft tokens in all), when
        that beats the best single draft in expected tokens per cost; (0, 0) otherwise.

        The branches are exclusive at the branch point, so the expected tokens of the two add:
        the shared prefix's, then each branch's agreement × reliability products.
        """
        if match_length < self.min_match or alt_agree.size == 0:
            return 0, 0
        hits, trials = self.calibration(source)
        n_a, n_b = best_two_branches(
            match_length, agree, branch_point, alt_agree, max_total, hits, trials, self.cost,
            MIN_PREFIX_PROBABILITY,
        )
        return int(n_a), int(n_b)

    def observe(self, match_length: int, drafted: int, accepted: int, source: str = REQUEST) -> None:
        """Record that `accepted` of `drafted` tokens proposed from a match of this length (found
        in `source`) were kept."""
        kind = CORPUS if source == CORPUS else REQUEST
        record_outcome(match_length, drafted, accepted, *self._own(kind))
        if not self._samples:  # sampled tokens' outcomes say the temperature too: the prior scales for it
            self.past.record(kind, match_length, drafted, accepted)

    def observe_sampling(self, samples: int, most_likely: int) -> None:
        """Record that `most_likely` of `samples` tokens sampled at temperature > 0 were the
        model's most likely token (greedy decoding reports nothing: it always is)."""
        self._samples += samples
        self._samples_most_likely += most_likely
