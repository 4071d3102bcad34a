"""A slot's cache holds exactly its tokens after every kind of step (issue 24, item 6): a roll-back
one cell short, a branch copied one cell late or a prompt chunk at the wrong position shows here
as cells where none should be, or, in the exact build, as a row that is not a fresh decode's.

Checked inside the engine as each step ends (its ``trace`` hook, before the next step can change
anything): for every slot, its sequence's cells are positions 0..n-1 (``llama_memory_seq_pos_min``
/ ``_max``), its branch sequence holds none, its buffer begins with the prompt (written whole at
admission) and its ``tokens[:n]`` are the prompt and then the tokens it emitted but the newest (the
pending one, never in the cache); while prefilling, a prefix of the prompt. The steps are classified (all of a draft accepted, part rejected, a branch taken,
a prompt chunk) so that the test says which kinds it saw.
"""

from __future__ import annotations

import itertools
from collections import Counter

import llama_cpp
import numpy as np
import pytest
from conftest import LLAMA_KWARGS, pair
from test_branches_greedy import BRANCHY

import plookup
from plookup.draft.policy import CPU_COST_CURVE
from plookup.measure.settings import llamafile_in_build

EXACT_BUILD = not llamafile_in_build()


class CheckedSteps(list):
    """A ``Step.trace`` that checks every slot's cells as each step ends, the generations' on
    them being of `prompts`."""

    def __init__(self, llm, prompts):
        super().__init__()
        self.llm, self.prompts, self.kinds, self.problems = llm, prompts, Counter(), []

    def append(self, record) -> None:
        super().append(record)
        for drafted, accepted in zip(record.drafted, record.accepted):
            if drafted:
                self.kinds["all accepted" if accepted == drafted else "part rejected"] += 1
        if record.prefilled:
            self.kinds["prompt chunk"] += 1
        for slot in self.llm._engine.slots:
            self.problems += [f"step {len(self)}, slot {slot.index}: {p}" for p in slot_problems(self.llm, slot, self.prompts)]


def slot_problems(llm, slot, prompts=()) -> list[str]:
    memory = llama_cpp.llama_get_memory(llm.ctx)
    problems = []
    cells = (llama_cpp.llama_memory_seq_pos_min(memory, slot.seq), llama_cpp.llama_memory_seq_pos_max(memory, slot.seq))
    if cells != ((0, slot.n - 1) if slot.n else (-1, -1)):
        problems.append(f"cells at positions {cells}, tokens[:n] with n = {slot.n}")
    if slot.branch_seq >= 0 and llama_cpp.llama_memory_seq_pos_max(memory, slot.branch_seq) != -1:
        problems.append("the branch sequence kept cells")
    gen = slot.generation
    if gen is None:
        return problems
    length = gen.prompt_length
    if slot.tokens[:length].tolist() not in prompts:  # written once, at admission
        problems.append(f"tokens[:{length}] are none of the prompts {[len(p) for p in prompts]}")
    if gen.prefilling:
        if slot.n > length:
            problems.append(f"prefilling, n = {slot.n} past the prompt's {length}")
    elif gen.error is None and slot.n != length + gen.emitted - 1:
        problems.append(f"n = {slot.n}, not the prompt's {length} and {gen.emitted} emitted tokens but the pending one")
    return problems


def checked(llm, *prompts) -> CheckedSteps:
    llm._engine.step.trace = steps = CheckedSteps(llm, [list(p) for p in prompts])
    return steps


@pytest.fixture
def flat_curve(any_model_pair):
    """A flat verify cost, as on a GPU: the policy drafts long and with two branches."""
    _, _, spec = any_model_pair
    saved = spec.drafter.policy.cost
    spec.drafter.use_cost_curve(np.ones(16))
    yield
    spec.drafter.use_cost_curve(saved)


@pytest.mark.budget(60)
def test_every_step_leaves_the_cache_holding_the_slots_tokens(any_model_pair, flat_curve):
    name, _, spec = any_model_pair
    prompt = spec.tokenize(BRANCHY.encode())
    steps = checked(spec, prompt)
    try:
        with spec.request() as call:
            tokens = list(itertools.islice(spec.generate(prompt, temp=0.0), 48))
        # A prediction that the answer leaves after a few tokens: its drafts are cut short.
        with spec.request(prediction=spec.detokenize(tokens[:6]).decode(errors="ignore") + " violet plum, blue" * 4):
            list(itertools.islice(spec.generate(prompt, temp=0.0), 24))
    finally:
        spec._engine.step.trace = None
    assert steps.problems == []
    assert steps.kinds["all accepted"] and steps.kinds["part rejected"] and steps.kinds["prompt chunk"], steps.kinds
    assert call.stats.branch_steps > 0 or spec.exact  # two-branch verify steps were among them
    if name == "smollm2" and not spec.exact:  # (where verification is exact, drafts have no branch)
        assert call.stats.alternative_taken > 0  # ... one of which took the branch (the cells copied from it)
    assert slot_problems(spec, spec._engine.slots[0]) == []  # and once the generations were given back


@pytest.mark.budget(60)
def test_a_cancelled_generation_leaves_only_what_was_taken(any_model_pair):
    _, _, spec = any_model_pair
    taken = []
    with spec.request(cancelled=lambda: len(taken) >= 5):
        for token in spec.generate(spec.tokenize(BRANCHY.encode()), temp=0.0):
            taken.append(token)
    slot = spec._engine.slots[0]
    assert 5 <= len(taken) < 20 and slot_problems(spec, slot) == []
    assert slot.n <= len(spec.tokenize(BRANCHY.encode())) + len(taken)


@pytest.fixture(scope="module")
def two_slots(model_path):
    # n_batch 32: a prompt is prefilled in chunks, in the steps where the other slot decodes (and
    # in the exact build the slots' probe fits its rows to the batch: it once wrote past it); the
    # built-in curve, as this context's own is not what these tests check (measuring it took 21 s)
    return plookup.Llama(model_path["smollm2"], parallel=2, n_batch=32, n_ubatch=32, cost_curve=CPU_COST_CURVE,
                         **LLAMA_KWARGS)


@pytest.mark.budget(60)
def test_prompt_chunks_beside_another_slots_decoding_keep_both_caches(two_slots):
    llm = two_slots
    first = llm.tokenize(("def add(a, b):\n    return a + b\n\n" * 6).encode())
    second = llm.tokenize(("The quick brown fox jumps over the lazy dog. " * 8).encode())
    assert len(second) > 64  # three chunks or more
    steps = checked(llm, first, second)
    outputs = {0: [], 1: []}
    try:
        with llm.request():
            a = llm.generate(first, temp=0.0)
            outputs[0].append(next(a))  # slot 0 decoding ...
            with llm.request():
                b = llm.generate(second, temp=0.0)
                for _ in range(24):  # ... while slot 1 prefills in chunks, then both decode
                    outputs[0].append(next(a))
                    outputs[1].append(next(b))
                b.close()
            a.close()
    finally:
        llm._engine.step.trace = None
    mixed = [r for r in steps if r.prefilled and r.drafted]
    assert steps.problems == [] and steps.kinds["prompt chunk"] >= 3 and mixed, steps.kinds
    for slot, prompt in zip(llm._engine.slots, (first, second)):
        assert slot_problems(llm, slot) == []
        assert slot.tokens[: slot.n].tolist() == [*prompt, *outputs[slot.index]][: slot.n]


@pytest.mark.exact_build
@pytest.mark.skipif(not EXACT_BUILD, reason="a cached row equals a fresh decode's bitwise only in the exact build (make EXACT=1)")
@pytest.mark.budget(60)
def test_the_row_after_the_cache_is_a_fresh_decodes_bitwise(model_path):
    """The cells' content, not only their positions: after a generation with accepted and
    rejected drafts, the row of one more token decoded on the cache equals plain llama_cpp's for
    the same tokens, decoded as its own loop decodes them. (Here plookup drafts single branches
    only, as long as the probe found exact: a branch taken is checked for its cells' positions
    above, in the default build.)"""
    _, plain, spec = pair("smollm2", model_path)
    assert spec.exact
    spec._engine.forget()  # its prompt prefilled now, as plain's is
    prompt = spec.tokenize(BRANCHY.encode())
    saved = spec.drafter.policy.cost
    spec.drafter.use_cost_curve(np.ones(16))
    try:
        with spec.request() as call:
            list(itertools.islice(spec.generate(prompt, temp=0.0), 48))
    finally:
        spec.drafter.use_cost_curve(saved)
    assert 0 < call.stats.accepted < call.stats.drafted
    slot = spec._engine.slots[0]
    cached = slot.tokens[: slot.n].tolist()
    probe = spec.tokenize(b" kiwi", add_bos=False)[0]

    def next_row():
        from plookup.verify.rows import fill, sequence_rows

        fill(spec._batch.batch, sequence_rows([probe], slot.n, slot.seq))
        spec._ctx.decode(spec._batch)
        row = spec._logits_row(0).copy()
        spec._ctx.kv_cache_seq_rm(slot.seq, slot.n, -1)
        return row

    got = []
    spec._engine._wait_for(lambda: got.append(next_row()))
    plain.reset()
    plain.eval(prompt)
    for token in [*cached[len(prompt):], probe]:  # one at a time, as llama_cpp's generate decodes
        plain.eval([token])
    expected = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(plain.ctx, -1), shape=(plain.n_vocab(),))
    assert np.array_equal(got[0], expected)
