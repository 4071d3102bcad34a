"""Drafts sized for the whole batch (pure, against plain-Python references), the always-right bound, the decode thread."""

from __future__ import annotations

import itertools
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plookup.draft.policy import CPU_COST_CURVE, DraftPolicy
from plookup.draft.sizing import size_batch

from support.threads import run_concurrently

FLAT = np.ones(80)


LINEAR = np.arange(1, 81, dtype=float)  # n rows cost n single decodes: no draft can pay


# Qwen2.5-Coder-0.5B Q8_0 here, relative to a one-token decode, at 1, 4, 8, 16, 32, 64, 68 rows.
QWEN_ROWS = [1, 4, 8, 16, 32, 64, 68]


QWEN_COST = np.interp(np.arange(1, 69), QWEN_ROWS, [1.0, 1.57, 2.33, 3.98, 7.44, 13.7, 14.6])


def batch_cost(rows, cost):
    if rows <= len(cost):
        return cost[rows - 1]
    return cost[-1] + (cost[-1] - 1) / max(1, len(cost) - 1) * (rows - len(cost))


def reference_sizes(probabilities, cost, max_rows):
    """The rule written out: every way to give each slot a prefix of its draft, scored by
    (slots + sum of the drafted tokens' probabilities) / cost(rows); the best, ties to the fewest
    rows. Exponential, so for small cases only. Agrees with the greedy kernel because each
    slot's probabilities are non-increasing (a prefix of the greedy order is optimal)."""
    m = len(probabilities)
    best, best_rate = [0] * m, m / batch_cost(m, cost)
    for lengths in itertools.product(*[range(len(p) + 1) for p in probabilities]):
        rows = m + sum(lengths)
        if rows > max_rows:
            continue
        rate = (m + sum(sum(p[:n]) for p, n in zip(probabilities, lengths))) / batch_cost(rows, cost)
        if rate > best_rate + 1e-9:
            best, best_rate = list(lengths), rate
    return best, best_rate


def rate_of(lengths, probabilities, cost):
    m = len(probabilities)
    return (m + sum(sum(p[:n]) for p, n in zip(probabilities, lengths))) / batch_cost(m + sum(lengths), cost)


def decreasing(values):
    return np.cumprod(values)


def test_flat_curve_drafts_everything_linear_none():
    sure = [decreasing(np.full(16, 0.9)) for _ in range(8)]
    assert size_batch(sure, FLAT, 512) == [16] * 8
    assert size_batch(sure, LINEAR, 512) == [0] * 8
    assert size_batch([decreasing(np.full(16, 0.99))], LINEAR, 512) == [0]


def test_a_busy_batch_drafts_less():
    p = decreasing(np.full(16, 0.9))
    totals = [sum(size_batch([p] * m, QWEN_COST, 512)) / m for m in (1, 2, 4, 8)]
    assert totals == sorted(totals, reverse=True) and totals[0] > totals[-1]
    # The row budget binds: 4 slots with room for 10 rows in all.
    assert sum(size_batch([p] * 4, FLAT, 10)) == 6


def test_the_likelier_slot_gets_the_rows():
    sure, unsure = decreasing(np.full(16, 0.98)), decreasing(np.full(16, 0.3))
    n_sure, n_unsure = size_batch([sure, unsure], QWEN_COST, 512)
    assert n_sure > 0 and n_unsure < n_sure


@settings(max_examples=300, deadline=None)
@given(
    draws=st.lists(st.lists(st.floats(0.05, 1.0), min_size=0, max_size=4), min_size=1, max_size=3),
    curve=st.sampled_from(["flat", "cpu", "qwen", "linear"]),
    max_rows=st.integers(1, 20),
)
def test_batch_sizing_matches_brute_force(draws, curve, max_rows):
    cost = {"flat": FLAT, "cpu": CPU_COST_CURVE, "qwen": QWEN_COST, "linear": LINEAR}[curve]
    probabilities = [decreasing(d) for d in draws]
    max_rows = max(max_rows, len(probabilities))
    got = size_batch(probabilities, cost, max_rows)
    want, want_rate = reference_sizes(probabilities, cost, max_rows)
    assert m_rows(got, probabilities) <= max_rows
    assert rate_of(got, probabilities, cost) == pytest.approx(want_rate, rel=1e-9)


def m_rows(lengths, probabilities):
    return len(probabilities) + sum(lengths)


@settings(max_examples=200, deadline=None)
@given(
    match_length=st.integers(2, 200),
    agree=st.lists(st.floats(0.0, 1.0), min_size=0, max_size=16),
    outcomes=st.lists(st.tuples(st.integers(2, 64), st.integers(1, 16), st.integers(0, 16)), max_size=6),
    curve=st.sampled_from(["cpu", "qwen", "flat"]),
)
def test_one_slot_chooses_what_the_single_stream_policy_chooses(match_length, agree, outcomes, curve):
    cost = {"cpu": CPU_COST_CURVE, "qwen": QWEN_COST[:17], "flat": FLAT[:16]}[curve]
    policy = DraftPolicy(cost=cost)
    for length, drafted, accepted in outcomes:
        policy.observe(length, drafted, min(accepted, drafted))
    agree = np.array(agree)
    p = policy.prefix_probabilities(match_length, agree)
    assert size_batch([p], policy.cost, 512) == [policy.choose(match_length, agree)]


def test_a_broken_sizing_rule_fails_the_reference():
    """The control: sizing each slot as if it were alone (the single-stream policy) ignores what
    the rest of the batch costs, and the brute-force reference tells it apart."""
    probabilities = [decreasing(np.full(4, 0.9))] * 4
    alone = [size_batch([p], QWEN_COST, 512)[0] for p in probabilities]
    _, want = reference_sizes(probabilities, QWEN_COST, 512)
    assert rate_of(alone, probabilities, QWEN_COST) < want - 1e-6
    assert rate_of(size_batch(probabilities, QWEN_COST, 512), probabilities, QWEN_COST) == pytest.approx(want)


def test_the_always_right_bound_of_a_batch():
    from plookup.app.bench.concurrency import always_right_bound

    assert always_right_bound(FLAT, 4, 16) == pytest.approx(17.0)  # free rows: 17 tokens a step for 1
    assert always_right_bound(LINEAR, 4, 16) == pytest.approx(1.0)  # rows cost what they yield
    # The figures: 4 slots on Qwen2.5-Coder-0.5B Q8_0 here; 64 rows for 13.7 single decodes
    # beat 68 for 14.6 (16 tokens a slot, not 17): 1.83x over 4 rows for 1.57.
    assert always_right_bound(QWEN_COST, 4, 16) == pytest.approx((64 / 13.7) / (4 / 1.57), rel=1e-6)


def test_a_decode_thread_runs_every_call_on_one_thread_and_returns_its_errors():
    from plookup.engine.decode_thread import DecodeThread

    seen = []

    def decode(batch):
        seen.append(threading.get_ident())
        if batch == "bad":
            raise RuntimeError("llama_decode returned 1")
        return batch

    decode_thread = DecodeThread()
    routed = decode_thread.route(decode)
    assert run_concurrently(None, [1, 2, 3, 4], routed) == [1, 2, 3, 4]
    with pytest.raises(RuntimeError, match="returned 1"):
        routed("bad")
    decode_thread.close()
    assert len(set(seen)) == 1 and seen[0] != threading.get_ident()
    # the control: the same calls unrouted run on the callers' threads
    seen.clear()
    run_concurrently(None, [1, 2, 3, 4], lambda b: (decode(b), time.sleep(0.05)))
    assert len(set(seen)) > 1


def simulated_equal_split(rows, cost, seqs=None):
    """llama.cpp's ``split_equal`` run over the batch's rows as it does it: a row per (sequence)
    in sequence order; a ubatch gathers, from the first unused row on, each sequence whose id is
    the last one's + 1 and that has unused rows, and takes rows from all of them while every one
    has some left."""
    seqs = list(range(len(rows))) if seqs is None else seqs
    batch = [seq for seq, r in zip(seqs, rows) for _ in range(r)]
    used = [False] * len(batch)
    total = 0.0
    while not all(used):
        members = []
        for i, seq in enumerate(batch):
            if used[i] or seq in members:
                continue
            if not members or seq == members[-1] + 1:
                members.append(seq)
        unused = {seq: [i for i, s in enumerate(batch) if s == seq and not used[i]] for seq in members}
        take = min(len(v) for v in unused.values())
        for v in unused.values():
            for i in v[:take]:
                used[i] = True
        total += batch_cost(take * len(members), cost)
    return total


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.integers(0, 17), min_size=1, max_size=8), gaps=st.lists(st.integers(1, 2), min_size=8, max_size=8))
def test_a_streams_step_costs_its_ubatches(rows, gaps):
    from plookup.draft.sizing import streams_step_cost

    seqs = list(np.cumsum(gaps[: len(rows)]))  # increasing, some neighbours and some not
    assert streams_step_cost(rows, QWEN_COST, seqs) == pytest.approx(simulated_equal_split(rows, QWEN_COST, seqs))
    # consecutive sequences, the default
    assert streams_step_cost(rows, QWEN_COST) == pytest.approx(simulated_equal_split(rows, QWEN_COST))


def test_a_sequence_between_two_drafts_splits_them():
    """The split llama.cpp makes (control for the adjacency rule): drafts of 8 on sequences 0 and
    2 with sequence 1 pending one row take a ubatch each, where on 0 and 1 they take one."""
    from plookup.draft.sizing import streams_step_cost

    apart = streams_step_cost([9, 1, 9], QWEN_COST)
    together = streams_step_cost([9, 9, 1], QWEN_COST)
    assert apart == pytest.approx(batch_cost(3, QWEN_COST) + 2 * batch_cost(8, QWEN_COST))
    assert together == pytest.approx(batch_cost(3, QWEN_COST) + batch_cost(16, QWEN_COST))
    assert apart > together


def stream_family(probabilities, n, seqs=None, fixed=()):
    """size_streams's family for draft length n: the likeliest k slots (k = 1..m), and every run
    of neighbouring slots, each able to draft n (neighbours in the order of the sequences, a
    sequence with a fixed row between two slots parting them)."""
    able = [i for i, p in enumerate(probabilities) if len(p) >= n]
    by_gain = sorted(able, key=lambda i: (-float(np.sum(probabilities[i][:n])), -i))
    family = [set(by_gain[:k]) for k in range(1, len(by_gain) + 1)]
    seqs = list(range(len(probabilities))) if seqs is None else seqs
    order = sorted([(seq, i) for i, seq in enumerate(seqs)] + [(seq, None) for seq in fixed])
    for start in range(len(order)):
        for end in range(start + 1, len(order) + 1):
            run = [i for _, i in order[start:end]]
            if all(i is not None and i in able for i in run):
                family.append(set(run))
    return family


@settings(max_examples=150, deadline=None)
@given(probabilities=st.lists(st.lists(st.floats(0.01, 1.0), max_size=6).map(decreasing), min_size=1, max_size=5),
       gaps=st.lists(st.integers(1, 2), min_size=5, max_size=5), fillers=st.integers(0, 4))
def test_streams_sizing_is_the_best_of_its_family(probabilities, gaps, fillers):
    """Brute force over the family size_streams searches (the likeliest k slots drafting n
    tokens each, or a run of neighbours, n within every chosen slot's candidate; the others
    none; or drafting nothing), on sequences with and without gaps between them, some gaps with a
    row that yields nothing (a filler); and never better than the best of every set of slots (the
    family is a heuristic, not an oracle)."""
    from plookup.draft.sizing import size_streams, streams_step_cost

    probabilities = [np.array(p) for p in probabilities]
    m = len(probabilities)
    seqs = [int(seq) for seq in np.cumsum(gaps[:m])]
    fixed = [seq for seq in range(seqs[0], seqs[-1]) if seq not in seqs][: fillers]  # a row each, no token

    def rate(lengths):  # the step's cost: llama.cpp's split of all its rows
        gained = sum(float(np.sum(p[:n])) for p, n in zip(probabilities, lengths))
        rows = dict(zip(seqs, [1 + n for n in lengths])) | {seq: 1 for seq in fixed}
        return (m + gained) / streams_step_cost([rows[seq] for seq in sorted(rows)], QWEN_COST, sorted(rows))

    best = rate([0] * m)
    oracle = best
    for n in range(1, 7):
        for chosen in stream_family(probabilities, n, seqs, fixed):
            best = max(best, rate([n if i in chosen else 0 for i in range(m)]))
        for chosen in itertools.product([False, True], repeat=m):
            if not any(c and len(p) < n for c, p in zip(chosen, probabilities)):
                oracle = max(oracle, rate([n if c else 0 for c in chosen]))
    lengths = size_streams(probabilities, QWEN_COST, 200, seqs, fixed)
    assert all(n <= len(p) for n, p in zip(lengths, probabilities))
    assert len({n for n in lengths if n}) <= 1  # one draft length
    assert rate(lengths) == pytest.approx(best)
    assert rate(lengths) <= oracle + 1e-9


def test_streams_sizing_keeps_drafts_together():
    """Two slots with likely drafts and a slot between them with none. The old rule costed every
    split as if the drafting sequences were neighbours (the counts sorted) and drafted 4 on both:
    at the true split, a pass over the weights each, that step yields 1.89 tokens per single
    decode against 2.17 for drafting nothing, which sizing by the true split chooses (the control:
    the old choice's rate under the true cost is lower)."""
    from plookup.draft.sizing import size_streams, streams_step_cost

    likely = np.cumprod(np.full(8, 0.86))
    probabilities = [likely, np.zeros(0), likely]

    def rate(lengths, cost_of):
        gained = sum(float(np.sum(p[:n])) for p, n in zip(probabilities, lengths))
        return (3 + gained) / cost_of([1 + n for n in lengths])

    true_cost = lambda rows: streams_step_cost(rows, QWEN_COST)  # noqa: E731
    sorted_cost = lambda rows: streams_step_cost(sorted(rows), QWEN_COST)  # noqa: E731
    old_family = [[0, 0, 0]] + [[n, 0, n] for n in range(1, 9)] + [[n, 0, 0] for n in range(1, 9)]
    old = max(old_family, key=lambda lengths: rate(lengths, sorted_cost))
    assert old == [4, 0, 4]
    lengths = size_streams(probabilities, QWEN_COST, 200)
    assert lengths == [0, 0, 0]
    assert rate(lengths, true_cost) == pytest.approx(2.17, abs=0.01)
    assert rate(old, true_cost) == pytest.approx(1.89, abs=0.01)


def test_idle_slots_between_do_not_make_drafts_look_free():
    """Slots on sequences 0, 2, 4, 6, the idle ones between filled with a row each (the sizing is
    told of them): a draft must pay against the pending rows in one pass, as where the slots are
    neighbours. The control: costing the pending rows as the unfilled split (a pass per slot) made
    unlikely drafts look free (free text at 8 clients drafted 106-214 tokens a run and kept a
    fifth)."""
    from plookup.draft.sizing import size_streams, streams_step_cost

    unlikely = [np.cumprod(np.full(8, 0.3)) for _ in range(4)]
    assert size_streams(unlikely, QWEN_COST, 200, [0, 1, 2, 3]) == [0, 0, 0, 0]
    assert size_streams(unlikely, QWEN_COST, 200, [0, 2, 4, 6], fixed=[1, 3, 5]) == [0, 0, 0, 0]
    # under the unfilled split's cost, drafting would have looked better than not
    gained = 4 * float(np.sum(unlikely[0][:2]))
    unfilled = (4 + gained) / streams_step_cost([3, 3, 3, 3], QWEN_COST, [0, 2, 4, 6])
    assert unfilled > 4 / streams_step_cost([1, 1, 1, 1], QWEN_COST, [0, 2, 4, 6])


def test_streams_sizing_on_given_curves():
    from plookup.draft.sizing import size_streams

    sure = [np.full(8, 0.99) for _ in range(4)]
    assert size_streams(sure, FLAT, 200) == [8, 8, 8, 8]  # free rows: everyone drafts it all
    assert size_streams(sure, LINEAR, 200) == [0, 0, 0, 0]  # rows cost what they yield: none
    # the batch's row limit: four drafts of 4 in one ubatch beat two of 8 in a second one
    assert size_streams(sure, FLAT, 4 + 2 * 8) == [4, 4, 4, 4]
    # one slot with a candidate: the others decode one row each, in the first ubatch
    assert size_streams([np.full(8, 0.99), np.zeros(0)], FLAT, 200) == [8, 0]
