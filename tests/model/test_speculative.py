"""Speculation per request (llama-server's `speculative: {n_max, n_min, p_min}`), and each slot's
drafter kept between requests, its index started over where llama_cpp's own eval wrote the buffer
it reads."""

from __future__ import annotations

import itertools

import pytest

import plookup
from plookup.draft.policy import CPU_COST_CURVE
from plookup.draft.values import PLAIN
from plookup.index.suffix import SuffixIndex

from conftest import LLAMA_KWARGS

# A prompt that repeats: without a bound the drafter drafts long and is accepted.
REPEATS = list(range(300, 340)) * 3


@pytest.fixture(scope="module")
def smol(model_path):
    # The built-in CPU curve, as conftest's smol: a curve this machine measured under load priced every
    # draft over 6 tokens too dear, and the unbounded control then drafted short (seen 2026-12-06).
    return plookup.Llama(model_path["smollm2"], cost_curve=CPU_COST_CURVE, **LLAMA_KWARGS)


def drafts_of(llm, speculative, n=48):
    """(tokens, each step's draft length) of a greedy generation of n tokens over REPEATS."""
    llm._engine.step.trace = []
    try:
        with llm.request(speculative=speculative):
            tokens = list(itertools.islice(llm.generate(REPEATS, temp=0.0), n))
        return tokens, [d for step in llm._engine.step.trace for d in step.drafted]
    finally:
        llm._engine.step.trace = None


@pytest.mark.budget(40)
def test_each_request_bounds_its_own_drafts(smol):
    tokens, drafts = drafts_of(smol, None)
    assert max(drafts) > 8  # the control: unbounded, this request drafts long
    plain, none = drafts_of(smol, PLAIN)
    assert not any(none) and len(none) == 47  # n_max 0: plain decoding, one step a token after the prompt's
    short, four = drafts_of(smol, {"n_max": 4})
    assert 0 < max(four) <= 4
    _, dropped = drafts_of(smol, {"n_min": 1000})
    assert not any(dropped)
    _, unlikely = drafts_of(smol, {"p_min": 1.0})
    assert not any(unlikely)  # no estimate of a draft token's chance reaches 1
    assert plain == short == tokens  # greedy: the same text however long the drafts (near ties aside)
    tokens, drafts = drafts_of(smol, None)
    assert max(drafts) > 8  # the bound was that request's, not the model's


@pytest.mark.budget(40)
def test_a_bad_speculative_field_fails_before_any_work(smol):
    before = smol._engine.step.steps
    with pytest.raises(ValueError, match="speculative.n_max"):
        smol.create_completion(REPEATS, max_tokens=4, speculative={"n_max": -2})
    assert smol._engine.step.steps == before
    result = smol.create_completion(REPEATS, max_tokens=8, temperature=0.0, speculative={"n_max": 0})
    assert result["usage"]["completion_tokens"] == 8 and result["usage"]["speculative"]["drafted"] == 0


@pytest.mark.budget(40)
def test_every_slot_keeps_its_drafter_and_index_between_requests(model_path):
    """Slot 1's follow-up request drafts with the drafter of its first one, which indexes only what
    is new (slots >= 1 used to get a fresh drafter, and index the whole prompt, at every request).
    Its drafts are sized by the built-in curve, as `smol`'s: a measured two-slot curve (130 rows,
    55 s on a clean machine) would decide nothing this test reads."""
    llm = plookup.Llama(model_path["smollm2"], parallel=2, cost_curve=CPU_COST_CURVE, **LLAMA_KWARGS)
    first = llm.generate(list(range(500, 540)) * 2, temp=0.0)
    next(first)  # slot 0 is taken by this generation, still open
    prompt = REPEATS
    with llm.request() as call:
        call.max_tokens = 16  # the engine emits no more than its caller takes: the index holds them all
        answer = list(itertools.islice(llm.generate(prompt, temp=0.0), 16))
    slot, drafter = call.generation.slot, call.generation.drafter
    assert slot.index == 1 and drafter is slot.drafter and drafter is not llm.drafter
    assert drafter.index.tokens.tolist() == prompt + answer
    extended = []
    original = drafter.cover
    drafter.cover = lambda n: extended.append(n - len(drafter.index)) or original(n)
    follow_up = prompt + answer + [11, 12, 13]
    with llm.request() as again:
        list(itertools.islice(llm.generate(follow_up, temp=0.0), 8))
    assert again.generation.slot is slot and again.generation.drafter is drafter
    assert extended[0] == 3  # only the new tokens were indexed
    assert again.stats.prefill_tokens == 4  # and the cells kept: the answer's newest token, and the new ones
    first.close()


def index_is_its_tokens(drafter) -> bool:
    """The drafter's index answers as one built afresh over the tokens it reads: its match, its
    continuation, and how much of its own beginning it finds."""
    index, fresh = drafter.index, SuffixIndex()
    fresh.extend(index.tokens)
    head = index.tokens[:8]
    return (index.match() == fresh.match() and index.feed(head)[1] == fresh.feed(head)[1] == len(head)
            and index.continuation(8)[0].tolist() == fresh.continuation(8)[0].tolist())


@pytest.mark.budget(40)
def test_slot_0s_drafter_starts_over_where_llama_cpps_own_eval_wrote_its_buffer(smol):
    """Slot 0's drafter reads the model's input_ids, which llama_cpp's eval writes too: a prompt
    that begins with what eval wrote there must not keep the index built over what was there
    before (the buffer would say yes to it). The control: without plookup.Llama's eval telling
    the engine, the index keeps the first request's automaton under the second's tokens."""
    first, own = [700, 701, 702, 703, 704], list(range(1000, 1008))
    written = [*own, *range(1100, 1110), *own[:3]]  # ends with its own beginning, which `first` lacks
    again = [*written, own[3]]

    def generate_over_what_eval_wrote():
        list(itertools.islice(smol.generate(first, temp=0.0), 3))
        smol.reset()
        smol.eval(written)
        list(itertools.islice(smol.generate(again, temp=0.0), 1))
        return index_is_its_tokens(smol.drafter)

    assert generate_over_what_eval_wrote()
    rewritten = smol._engine.rewritten
    smol._engine.rewritten = lambda: None  # (in place of the model's: the control)
    try:
        stale = not generate_over_what_eval_wrote()
    finally:
        smol._engine.rewritten = rewritten
    assert stale
