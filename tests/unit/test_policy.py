"""The draft-length policy on its own: cost curves, agreement, calibration, and its kernel."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plookup.draft.policy import CPU_COST_CURVE, MIN_PREFIX_PROBABILITY, N_BUCKETS, DraftPolicy

FLAT = np.ones(16)  # memory-bound hardware: verifying 16 tokens costs what one does
STEEP = np.arange(1, 17, dtype=float)  # n tokens cost n single decodes: drafting can never pay
SURE = np.ones(16)  # the index's continuation always agreed


def reference_choice(match_length, agree, hits, trials, cost):
    """The rule written out: argmax_n (1 + sum_{k<n} prod_{j<=k} q_j) / cost(n + 1), 0 if <= 1."""

    def bucket(length):
        return min(N_BUCKETS - 1, max(0, int(length).bit_length() - 1))

    def batch_cost(n):
        if n <= len(cost):
            return cost[n - 1]
        return cost[-1] + (cost[-1] - 1) / max(1, len(cost) - 1) * (n - len(cost))

    best_n, best_rate, p_all, expected = 0, 1.0, 1.0, 1.0
    for k in range(len(agree)):
        p_all *= agree[k] * hits[bucket(match_length + k)] / trials[bucket(match_length + k)]
        expected += p_all
        if expected / batch_cost(k + 2) > best_rate:
            best_n, best_rate = k + 1, expected / batch_cost(k + 2)
        if p_all < MIN_PREFIX_PROBABILITY:
            break
    return best_n


def test_flat_cost_drafts_long_steep_cost_drafts_nothing():
    assert DraftPolicy(cost=FLAT).choose(40, SURE) == 16
    assert DraftPolicy(cost=STEEP).choose(40, SURE) == 0
    assert 0 < DraftPolicy(cost=CPU_COST_CURVE).choose(40, SURE) <= 16


def test_draft_length_shrinks_as_cost_steepens():
    lengths = [DraftPolicy(cost=1 + slope * np.arange(16)).choose(6, SURE) for slope in (0.0, 0.2, 0.5, 0.9)]
    assert lengths == sorted(lengths, reverse=True) and lengths[0] > lengths[-1]


def test_short_matches_and_branch_points_draft_less():
    policy = DraftPolicy(cost=CPU_COST_CURVE)
    assert policy.choose(1, SURE) == 0  # below min_match
    assert policy.choose(64, SURE) >= policy.choose(3, SURE)
    branching = SURE.copy()
    branching[3] = 0.3  # this context was followed by draft[3] only 30% of the time
    assert policy.choose(64, branching) <= 3


def test_calibration_learns_from_outcomes():
    policy = DraftPolicy(cost=CPU_COST_CURVE)
    before = policy.choose(4, SURE)
    for _ in range(50):
        policy.observe(4, drafted=4, accepted=0)
    assert before > 0 and policy.choose(4, SURE) == 0
    for _ in range(500):
        policy.observe(4, drafted=4, accepted=4)
    assert policy.choose(4, SURE) > 0


def test_samples_that_are_rarely_the_argmax_shrink_the_first_drafts():
    greedy, hot = DraftPolicy(cost=CPU_COST_CURVE), DraftPolicy(cost=CPU_COST_CURVE)
    hot.observe_sampling(20, 8)  # a high temperature: 8 of 20 samples were the most likely token
    assert hot.reliability(40) == pytest.approx(greedy.reliability(40) * 10 / 22)
    assert 0 == hot.choose(3, SURE) < greedy.choose(3, SURE)
    assert hot.choose(40, SURE) < greedy.choose(40, SURE)
    # The request's own outcomes then count as they are: only the prior is scaled.
    for _ in range(200):
        hot.observe(40, drafted=4, accepted=4)
    assert hot.reliability(40) > 0.95
    hot.start_request()
    assert hot.reliability(40) == greedy.reliability(40)


def test_bad_arguments():
    with pytest.raises(ValueError, match="min_match"):
        DraftPolicy(min_match=0)
    for bad in ([], [1.0, -2.0], [[1.0]], [1.0, float("nan")]):
        with pytest.raises(ValueError, match="cost curve"):
            DraftPolicy(cost=bad)


@settings(max_examples=300, deadline=None)
@given(
    match_length=st.integers(0, 300),
    agree=st.lists(st.floats(0.0, 1.0), max_size=24),
    outcomes=st.lists(st.tuples(st.integers(1, 300), st.integers(0, 16), st.integers(0, 16)), max_size=20),
    slope=st.floats(0.0, 1.5),
)
def test_kernel_matches_the_rule_written_out(match_length, agree, outcomes, slope):
    policy = DraftPolicy(min_match=1, cost=1 + slope * np.arange(12))
    for length, drafted, accepted in outcomes:
        policy.observe(length, drafted, min(accepted, drafted))
    agree = np.asarray(agree, dtype=np.float64)
    expected = reference_choice(match_length, agree, *policy.calibration(), policy.cost)
    assert policy.choose(match_length, agree) == (expected if match_length >= 1 else 0)


class FakeLlama:
    input_ids = [0] * 512
    n_batch = 512
    _requires_eval = False

    def n_vocab(self):
        return 1000

    def n_ctx(self):
        return 512

    def reset(self):
        pass

    def eval(self, tokens):
        self.n_tokens = len(tokens)


def test_a_curve_measured_while_the_machine_was_busy_is_measured_again(monkeypatch):
    """Another process slows the multi-row decodes of the first half of the first pass by 1.6x: the
    halves disagree, a second pass is steady and is the curve. The control: a machine busy in
    every pass's first half warns and takes the passes' median."""
    from plookup.measure import costs

    calls = []

    def busy_at_first(llm, tokens, n_past):
        calls.append(len(tokens))
        busy = len(calls) <= 30 and len(tokens) > 1
        return (1.0 + 0.25 * (len(tokens) - 1)) * (1.6 if busy else 1.0)

    monkeypatch.setattr(costs, "_decode_seconds", busy_at_first)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cost = costs.measure_cost_curve(FakeLlama(), max_n=4, repeats=6)
    assert np.allclose(cost, [1.0, 1.25, 1.5, 1.75])
    per_pass = 6 * (costs.SINGLE_RUN + 3)  # each round a run of one-token decodes and sizes 2-4
    assert len(calls) == 1 + 2 * per_pass  # the warm-up and two passes

    calls.clear()

    def busy_every_first_half(llm, tokens, n_past):
        calls.append(len(tokens))
        busy = (len(calls) - 2) % per_pass < per_pass // 2 and len(tokens) > 1  # after the warm-up
        return (1.0 + 0.25 * (len(tokens) - 1)) * (1.6 if busy else 1.0)

    monkeypatch.setattr(costs, "_decode_seconds", busy_every_first_half)
    with pytest.warns(RuntimeWarning, match="speed moved"):
        cost = costs.measure_cost_curve(FakeLlama(), max_n=4, repeats=6)
    assert len(calls) == 1 + costs.MAX_PASSES * per_pass
    assert np.all(cost[1:] > [1.25, 1.5, 1.75])  # the median of passes that all saw the busy half


def test_cost_curve_times_one_token_decodes_as_plain_decoding_runs_them(monkeypatch):
    # A GPU backend replays a captured graph only while the batch shape repeats: a fake decode
    # that is 3x dearer whenever the shape changed must not make one-token decodes look dear.
    from plookup.measure import costs

    last = []

    def fake_decode_seconds(llm, tokens, n_past):
        changed = not last or last[-1] != len(tokens)
        last.append(len(tokens))
        return (1.0 + 0.1 * len(tokens)) * (3.0 if changed else 1.0)

    monkeypatch.setattr(costs, "_decode_seconds", fake_decode_seconds)
    cost = costs.measure_cost_curve(FakeLlama(), max_n=4, repeats=3)
    # steady one-token decode 1.1; an n-token verify step (its size new each time) 3 (1 + 0.1 n)
    assert cost[0] == 1.0
    assert np.allclose(cost[1:], [3 * 1.2 / 1.1, 3 * 1.3 / 1.1, 3 * 1.4 / 1.1])


def test_an_outcome_counts_the_judged_tokens_only_written_out():
    """Draft token k is judged only when tokens 0..k-1 were accepted, at match length L + k: the
    counts written out, not read from the policy (a mutation counting every drafted token as a
    trial went unnoticed by the tests that read them from it)."""
    def added(after, before):
        return np.round(after - before, 9).tolist()

    policy = DraftPolicy(cost=CPU_COST_CURVE)
    prior_hits, prior_trials = policy.calibration()
    policy.observe(4, drafted=4, accepted=1)  # tokens at lengths 4 (kept) and 5 (rejected): bucket [4, 8)
    policy.past.clear()  # the request's own counts over the fixed prior
    hits, trials = policy.calibration()
    assert added(hits, prior_hits) == [0, 0, 1, 0, 0, 0, 0, 0]
    assert added(trials, prior_trials) == [0, 0, 2, 0, 0, 0, 0, 0]
    policy.start_request()
    policy.observe(7, drafted=4, accepted=1)  # lengths 7 (kept, bucket [4, 8)) and 8 (rejected, [8, 16))
    policy.past.clear()  # the request's own counts over the fixed prior
    hits, trials = policy.calibration()
    assert added(hits, prior_hits) == [0, 0, 1, 0, 0, 0, 0, 0]
    assert added(trials, prior_trials) == [0, 0, 1, 1, 0, 0, 0, 0]
    policy.start_request()
    policy.observe(2, drafted=3, accepted=3)  # all kept: lengths 2, 3 ([2, 4)) and 4 ([4, 8))
    policy.past.clear()  # the request's own counts over the fixed prior
    hits, trials = policy.calibration()
    assert added(hits, prior_hits) == [0, 1 + 1, 1, 0, 0, 0, 0, 0]
    assert added(trials, prior_trials) == [0, 2, 1, 0, 0, 0, 0, 0]


def test_a_new_request_starts_from_what_the_earlier_ones_showed():
    """PastOutcomes: a model whose earlier requests' drafts from 4-token matches were rejected
    starts the next request without drafting one, where a fresh model drafts it (the control);
    longer matches' buckets are as they were; the request's own outcomes still move it."""
    policy, fresh = DraftPolicy(cost=CPU_COST_CURVE), DraftPolicy(cost=CPU_COST_CURVE)
    assert policy.choose(4, SURE) > 0
    for _ in range(3):  # three requests of 128 tokens, each with four such drafts rejected
        policy.start_request()
        for _ in range(4):
            policy.observe(4, drafted=8, accepted=0)
    policy.start_request()
    assert policy.choose(4, SURE) == 0 < fresh.choose(4, SURE)
    assert policy.reliability(4) == pytest.approx(0.8 * 4 / (4 + 12))  # the prior at 0.8, 12 misses past
    assert policy.reliability(64) == fresh.reliability(64)
    for _ in range(20):
        policy.observe(4, drafted=4, accepted=4)
    assert policy.choose(4, SURE) > 0


def test_the_past_never_raises_the_prior():
    """Kept drafts in earlier requests leave a new request's prior at the fixed one: its first
    drafts meet its own edits (raising it drafted 2310 tokens a run on code edits at 4 clients and
    kept 72 %, against 1757 and 91 %). The control: the prior leaned on the past unbounded is higher."""
    from plookup.draft.policy import PRIOR_HITS, PRIOR_WEIGHT

    policy, fresh = DraftPolicy(cost=CPU_COST_CURVE), DraftPolicy(cost=CPU_COST_CURVE)
    for _ in range(40):
        policy.observe(4, drafted=8, accepted=8)
    policy.start_request()
    assert policy.reliability(4) == fresh.reliability(4) and policy.choose(4, SURE) == fresh.choose(4, SURE)
    past = policy.past
    unbounded = (PRIOR_HITS + past.hits["request"]) / (PRIOR_WEIGHT + past.trials["request"])
    assert unbounded[2] > policy.reliability(4)


def test_the_past_fades_and_is_shared_by_a_models_slots():
    from plookup.draft.drafters import SuffixDrafter
    from plookup.draft.policy import PAST_TRIALS

    model = SuffixDrafter()
    slot = model.spawn()
    assert slot.policy.past is model.policy.past
    model.use_cost_curve(CPU_COST_CURVE)
    assert model.policy.past is slot.policy.past  # a measured curve keeps what the past showed
    for _ in range(1000):
        slot.policy.observe(4, drafted=1, accepted=0)
    past = model.policy.past
    assert past.trials["request"].max() == pytest.approx(PAST_TRIALS)  # the last 32 judged tokens count
    assert model.policy.reliability(4) < 0.15
    past.clear()
    assert model.policy.reliability(4) == DraftPolicy().reliability(4)


def test_sampled_requests_leave_the_past_as_it_was():
    """A sampled token's outcome says the temperature too, which the prior scales for already."""
    policy = DraftPolicy(cost=CPU_COST_CURVE)
    policy.observe_sampling(20, 8)
    for _ in range(50):
        policy.observe(4, drafted=4, accepted=0)
    assert policy.past.trials["request"].sum() == 0
