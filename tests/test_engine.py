"""The engine of slots: drafts sized for the whole batch (pure, against a plain-Python reference),
and several generations in the same steps on a real model (each one's answer its serial answer,
a failing one alone failing, no slot drafting from another's tokens)."""

from __future__ import annotations

import itertools
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import llama_cpp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import plookup
from plookup.app.bench.plain import chat_prompt_tokens, first_divergence, first_near_tie, greedy_with_gaps
from plookup.app.bench.workloads import standard_workloads
from plookup.draft.policy import CPU_COST_CURVE, DraftPolicy
from plookup.draft.sizing import size_batch

from conftest import LLAMA_KWARGS

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


# -- several generations in one batch, SmolLM2

MAX_TOKENS = 48
# Beside another slot's rows (a unified cache, the default build) the top-2 gap of SmolLM2 moved
# by up to 0.75 logits (p95 0.51) over 144 rows of plookup.measure.exactness.probe_slots: a wider
# near-tie than a lone verify batch's (NEAR_TIE, 0.3). The engine now gives each slot a KV stream,
# where the probe found more rows equal to their lone decode (16/71 against 0/71).
SHARED_NEAR_TIE = 0.8
PROMPTS = standard_workloads(seed=0)[:14:2] + standard_workloads(seed=0)[-2:]  # 7 code edits, 2 free


@pytest.fixture(scope="module")
def parallel_smol(model_path):
    return plookup.Llama(model_path["smollm2"], parallel=4, **LLAMA_KWARGS)


@pytest.fixture(scope="module")
def references(model_path, model_pair_smol):
    _, plain, _ = model_pair_smol
    prompts = [chat_prompt_tokens(plain, w.messages) for w in PROMPTS]
    return prompts, [greedy_with_gaps(plain, p, MAX_TOKENS) for p in prompts]


@pytest.fixture(scope="module")
def model_pair_smol(model_path):
    from conftest import pair

    return pair("smollm2", model_path)


def run_concurrently(llm, prompts, generate):
    with ThreadPoolExecutor(max_workers=len(prompts)) as pool:
        return list(pool.map(generate, prompts))


def greedy_tokens(llm, n):
    def generate(prompt):
        with llm.request() as call:
            tokens = list(itertools.islice(llm.generate(prompt, temp=0.0), n))
        return tokens, call.stats

    return generate


def check_against_plain(prompts, references, outputs):
    checked = 0
    for prompt, (reference, gaps), tokens in zip(prompts, references, outputs):
        tie = first_near_tie(gaps, SHARED_NEAR_TIE)
        tokens = tokens[: len(reference)]
        assert tokens[:tie] == reference[:tie], f"differs at {first_divergence(reference, tokens)} before the near-tie at {tie}"
        checked += min(tie, len(reference))
    return checked


@pytest.mark.budget(60)  # with the module's references: plain greedy on 9 prompts
def test_concurrent_greedy_answers_are_the_serial_answers(parallel_smol, references):
    llm = parallel_smol
    prompts, refs = references
    steps = llm._engine.steps
    outputs = run_concurrently(llm, prompts, greedy_tokens(llm, MAX_TOKENS))
    tokens = [t for t, _ in outputs]
    checked = check_against_plain(prompts, refs, tokens)
    assert checked >= len(prompts) * MAX_TOKENS // 8
    passes = sum(stats.forward_passes for _, stats in outputs)
    # They shared steps: fewer decodes than the generations' forward passes together.
    assert llm._engine.steps - steps < passes
    assert sum(stats.accepted for _, stats in outputs) > 0
    assert all(stats.exact is not True for _, stats in outputs)  # shared: not claimed exact
    # A slot drafts from its own request only: each slot's drafter (slot 0's is the model's, the
    # others' their own, kept between requests) indexed one prompt and its output, nothing of
    # another slot's.
    drafters = [llm.drafter] + [slot.drafter for slot in llm._engine.slots[1:]]
    assert all(drafters) and len({id(d) for d in drafters}) == len(drafters)
    for drafter in drafters:
        history = drafter.index.tokens.tolist()
        owners = [i for i, p in enumerate(prompts) if history[: len(p)] == p]
        assert len(owners) == 1
        i = owners[0]
        own = prompts[i] + tokens[i]  # the consumer stopped at MAX_TOKENS; its last step may run past
        n = min(len(history), len(own))
        assert n > len(prompts[i]) and history[:n] == own[:n]
    assert llm._engine.active() == 0


def test_a_failing_request_leaves_its_batch_mates_unchanged(parallel_smol, references):
    llm = parallel_smol
    prompts, refs = references
    prompts, refs = prompts[:4], refs[:4]

    class Boom(Exception):
        pass

    calls = []

    def exploding(ids, logits):
        calls.append(len(ids))
        if len(calls) > 5:
            raise Boom("a stopping criterion that raises")
        return False

    def generate(i):
        if i == 1:
            with pytest.raises(Boom):
                list(llm.generate(prompts[i], temp=0.0, stopping_criteria=llama_cpp.StoppingCriteriaList([exploding])))
            return None
        return list(itertools.islice(llm.generate(prompts[i], temp=0.0), MAX_TOKENS))

    outputs = run_concurrently(llm, range(4), generate)
    assert outputs[1] is None and len(calls) > 5
    others = [i for i in range(4) if i != 1]
    checked = check_against_plain([prompts[i] for i in others], [refs[i] for i in others], [outputs[i] for i in others])
    # Plain greedy's first near-ties (SHARED_NEAR_TIE) on these three prompts: 41, 4 and 0 tokens.
    assert checked >= 40
    # The model is usable after it: a lone request answers as before.
    assert list(itertools.islice(llm.generate(prompts[0], temp=0.0), 8)) == refs[0][0][:8]


def test_a_follow_up_request_reuses_its_slot_and_prefills_only_what_is_new(parallel_smol, references):
    llm = parallel_smol
    prompts, _ = references
    first = llm.create_completion(prompts[2], max_tokens=8, temperature=0)
    follow_up = prompts[2] + llm.tokenize(first["choices"][0]["text"].encode(), add_bos=False) + [198]
    second = llm.create_completion(follow_up, max_tokens=4, temperature=0)
    prefilled = second["usage"]["speculative"]["prefill_tokens"]
    assert 0 < prefilled <= len(follow_up) - len(prompts[2])


def test_batches_from_python_and_a_hang_up(parallel_smol, references):
    llm = parallel_smol
    prompts, refs = references
    results = llm.create_completions(prompts[:3], max_tokens=6, temperature=0)
    assert [r["usage"]["completion_tokens"] for r in results] == [6, 6, 6]
    with pytest.raises(ValueError, match="stream"):
        llm.create_completions(prompts[:2], stream=True)
    # A cancelled request ends at its next step; its batch-mate goes on to its max_tokens.
    gone = threading.Event()

    def hung_up():
        with llm.request(cancelled=gone.is_set):
            out = []
            for token in llm.generate(prompts[3], temp=0.0):
                out.append(token)
                if len(out) == 3:
                    gone.set()
            return out

    with ThreadPoolExecutor(2) as pool:
        short = pool.submit(hung_up)
        full = pool.submit(lambda: list(itertools.islice(llm.generate(prompts[4], temp=0.0), 24)))
    assert 3 <= len(short.result()) < MAX_TOKENS
    assert len(full.result()) == 24
    assert llm._engine.active() == 0


@pytest.mark.budget(45)
def test_sampling_keeps_each_requests_distribution_with_four_at_once(parallel_smol, model_pair_smol):
    """The chi-squared test of test_sampling.py, with four requests in every step: each request's
    first tokens, sampled at temperature 1 from its own seed, against plain decoding's."""
    from test_sampling import N_SAMPLES, N_TOKENS, PROMPT, SETTINGS, _generate_args, homogeneity_p_value, plain_counts

    name, plain, _ = model_pair_smol
    llm = parallel_smol
    prompt = llm.tokenize(PROMPT.encode())
    args = _generate_args(SETTINGS["temp1"])

    def sample(seed):
        with llm.request() as call:
            call.seed = seed
            tokens = tuple(itertools.islice(llm.generate(prompt, **args), N_TOKENS))
        return tokens, call.stats.drafted, call.stats.forward_passes

    steps = llm._engine.steps
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(sample, range(10**6, 10**6 + N_SAMPLES)))
    from collections import Counter

    got = Counter(tokens for tokens, _, _ in results)
    assert sum(drafted > 0 for _, drafted, _ in results) >= N_SAMPLES // 2, "too few drafts to test the rule"
    assert llm._engine.steps - steps < sum(passes for _, _, passes in results)  # requests shared steps
    expected = plain_counts(name, plain, "temp1")
    p = homogeneity_p_value(expected, got)
    assert p > 0.001, f"plookup x4 {got.most_common(5)} vs plain {expected.most_common(5)}"


def test_the_always_right_bound_of_a_batch():
    from plookup.app.bench.concurrency import always_right_bound

    assert always_right_bound(FLAT, 4, 16) == pytest.approx(17.0)  # free rows: 17 tokens a step for 1
    assert always_right_bound(LINEAR, 4, 16) == pytest.approx(1.0)  # rows cost what they yield
    # The figures: 4 slots on Qwen2.5-Coder-0.5B Q8_0 here; 64 rows for 13.7 single decodes
    # beat 68 for 14.6 (16 tokens a slot, not 17): 1.83x over 4 rows for 1.57.
    assert always_right_bound(QWEN_COST, 4, 16) == pytest.approx((64 / 13.7) / (4 / 1.57), rel=1e-6)


def test_llama_cpps_own_checks_read_the_requests_slot(parallel_smol, references):
    """llama_cpp's completion code calls the stopping criteria once more after the generation,
    with the model's ``_input_ids``: that must be this request's slot, not slot 0 (which another
    request holds here); a chat template's stop-token criterion reads it on every chat request."""
    llm = parallel_smol
    prompts, _ = references
    held, done = threading.Event(), threading.Event()

    def hold_slot_0():
        with llm.request():
            tokens = llm.generate(prompts[0], temp=0.0)
            next(tokens)
            held.set()
            done.wait(120)
            tokens.close()

    llm._engine.forget()
    holder = threading.Thread(target=hold_slot_0)
    holder.start()
    assert held.wait(120) and llm._engine.slots[0].generation is not None
    seen = []
    try:
        llm.create_completion(prompts[1], max_tokens=6, temperature=0,
                              stopping_criteria=llama_cpp.StoppingCriteriaList([lambda ids, _: seen.append(list(ids)) or False]))  # fmt: skip
    finally:
        done.set()
        holder.join()
    assert seen and all(ids[: len(prompts[1])] == prompts[1] for ids in seen)


def test_every_decode_of_several_slots_runs_on_one_thread(parallel_smol, references, monkeypatch):
    """OpenMP keeps a worker team per calling thread, and an idle one spins (see
    plookup.engine.decode_thread): the consumers' steps all decode on the model's own thread."""
    from llama_cpp import _internals

    from plookup.engine.decode_thread import teams_per_thread

    if not teams_per_thread():
        pytest.skip("this llama.cpp's CPU backend keeps no team per thread: decodes stay on the callers'")
    prompts, _ = references
    threads = set()
    decode = _internals.llama_cpp.llama_decode
    record = lambda ctx, batch: threads.add(threading.get_ident()) or decode(ctx, batch)  # noqa: E731
    monkeypatch.setattr(_internals.llama_cpp, "llama_decode", record)
    outputs = run_concurrently(parallel_smol, prompts[:3], greedy_tokens(parallel_smol, 6))
    assert [len(tokens) for tokens, _ in outputs] == [6, 6, 6]
    assert len(threads) == 1 and threading.get_ident() not in threads


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


# -- a KV stream per slot: uneven drafts split a step into ubatches


def simulated_equal_split(rows, cost):
    """llama.cpp's equal split run step by step: every ubatch takes as many rows from each
    sequence that has rows left as the one with the fewest has left."""
    left = [r for r in rows if r > 0]
    total = 0.0
    while left:
        take = min(left)
        total += batch_cost(take * len(left), cost)
        left = [r - take for r in left if r > take]
    return total


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.integers(0, 17), min_size=1, max_size=8))
def test_a_streams_step_costs_its_ubatches(rows):
    from plookup.draft.sizing import streams_step_cost

    assert streams_step_cost(rows, QWEN_COST) == pytest.approx(simulated_equal_split(rows, QWEN_COST))


@settings(max_examples=150, deadline=None)
@given(probabilities=st.lists(st.lists(st.floats(0.01, 1.0), max_size=6).map(decreasing), min_size=1, max_size=5))
def test_streams_sizing_is_the_best_of_its_family(probabilities):
    """Brute force over the family size_streams searches: any set of slots drafting n tokens
    each (n within every chosen slot's candidate), the others none; plus drafting nothing."""
    from plookup.draft.sizing import size_streams, streams_step_cost

    probabilities = [np.array(p) for p in probabilities]
    m = len(probabilities)

    def rate(lengths):
        gained = sum(float(np.sum(p[:n])) for p, n in zip(probabilities, lengths))
        return (m + gained) / streams_step_cost([1 + n for n in lengths], QWEN_COST)

    best = rate([0] * m)
    for n in range(1, 7):
        for chosen in itertools.product([False, True], repeat=m):
            if any(c and len(p) < n for c, p in zip(chosen, probabilities)):
                continue
            best = max(best, rate([n if c else 0 for c in chosen]))
    lengths = size_streams(probabilities, QWEN_COST, 200)
    assert all(n <= len(p) for n, p in zip(lengths, probabilities))
    assert len({n for n in lengths if n}) <= 1  # one draft length: at most two ubatches
    assert rate(lengths) == pytest.approx(best)


def test_streams_sizing_on_given_curves():
    from plookup.draft.sizing import size_streams

    sure = [np.full(8, 0.99) for _ in range(4)]
    assert size_streams(sure, FLAT, 200) == [8, 8, 8, 8]  # free rows: everyone drafts it all
    assert size_streams(sure, LINEAR, 200) == [0, 0, 0, 0]  # rows cost what they yield: none
    # the batch's row limit: four drafts of 4 in one ubatch beat two of 8 in a second one
    assert size_streams(sure, FLAT, 4 + 2 * 8) == [4, 4, 4, 4]
    # one slot with a candidate: the others decode one row each, in the first ubatch
    assert size_streams([np.full(8, 0.99), np.zeros(0)], FLAT, 200) == [8, 0]
