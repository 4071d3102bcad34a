"""The engine's parts, each alone, against a fake context handle (no model): admission hands a
request the free slot whose cells share the longest prefix with its prompt and keeps that prefix;
a verdict leaves its sequence holding exactly n_past + 1 + accepted cells (a broken roll-back is
caught: the control); the step puts each generation's rows together, in sequence order, and
judges each from its own first row. Together, over a real drafter: the slot's buffer is the one
copy of the history, written once a step (the prompt at admission, then the emitted tokens, never a
rejected draft token) and read there by the drafter's index, up to a context exactly full; slot
0's drafter starts over where something else wrote its buffer."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import numpy as np
import pytest

from plookup.api.stats import SpecStats
from plookup.draft.drafters import SuffixDrafter
from plookup.draft.values import PREDICTION, REQUEST, Draft, Speculative
from plookup.engine.admission import Admission
from plookup.engine.slot import Cells, Generation, Slot
from plookup.engine.step import Step
from plookup.engine.verdicts import Verdicts
from plookup.index.suffix import SuffixIndex
from plookup.verify.accept import accept


class FakeContext:
    """A context handle without llama.cpp: each sequence's cells as a set of positions, the rows
    of the latest batch, and the roll-backs asked for."""

    def __init__(self, n_ctx: int = 64, n_batch: int = 32):
        self.n_ctx, self.n_batch = n_ctx, n_batch
        self.can_shift = True
        self.cells: dict[int, set[int]] = {}
        self.rows: list = []
        self.logits: list[bool] = []
        self.roll_backs: list[tuple[int, int]] = []

    def hold(self, seq: int, n: int) -> None:
        self.cells[seq] = set(range(n))

    def roll_back(self, seq: int, n: int) -> bool:
        self.roll_backs.append((seq, n))
        if seq >= 0:
            self.cells[seq] = {p for p in self.cells.get(seq, set()) if p < n}
        return True

    def fill(self, rows, logits=None) -> None:
        self.rows, self.logits = list(rows), list(logits) if logits is not None else [True] * len(rows)

    def decode(self) -> None:
        for _, position, seqs in self.rows:
            for seq in seqs:
                self.cells.setdefault(seq, set()).add(position)

    def sample(self, sampler, row: int) -> int:
        return sampler.sample(None, row)

    def is_eog(self, token: int) -> bool:
        return False


class Drafter:
    """A drafter that proposes `draft` and records what it was told."""

    policy, max_draft, branches = None, 8, False

    def __init__(self, draft=()):
        self.draft = Draft(np.asarray(draft, dtype=np.int32), len(draft), REQUEST if len(draft) else None)
        self.bound, self.covered = None, []

    def bind(self, buffer, prompt, prediction=()):
        self.bound = (buffer, list(prompt))

    def cover(self, n):
        self.covered.append(n)

    def reset(self):
        pass

    def propose(self, limit):
        return self.draft

    def observe(self, path, accepted):
        pass

    def observe_sampling(self, samples, most_likely):
        pass

    def spawn(self):
        return Drafter()


def call(**fields):
    return SimpleNamespace(**dict(dict(stats=SpecStats(), prediction=[], memory=None, cache_reuse=None, logprobs=None,
                                       max_tokens=None, speculative=Speculative(), last_token_alone=False,
                                       is_cancelled=lambda: False), **fields))


def slot_holding(index: int, tokens: list[int], context: FakeContext, size: int = 64) -> Slot:
    slot = Slot(index, index, -1, Cells(size))
    slot.tokens[: len(tokens)] = tokens
    slot.n = len(tokens)
    context.hold(slot.seq, slot.n)
    return slot


# -- admission


class Chains:
    def __init__(self):
        self.detached = []

    def attach(self, seqs):
        raise AssertionError("a host sampler's slot gets no backend chain")

    def detach(self, seqs=None):
        self.detached.append(seqs)


def admitted(cached: list[list[int]], prompt: list[int]):
    context = FakeContext()
    slots = [slot_holding(i, tokens, context) for i, tokens in enumerate(cached)]
    drafter = Drafter()
    admission = Admission(context, slots, Chains(), SimpleNamespace(drafter=drafter), run_step=lambda: None)
    gen = admission.wait_for_slot(prompt, call(), sampler=None, randomly=False, stopping_criteria=None)
    return gen, slots, context


def test_admission_hands_the_slot_with_the_longest_shared_prefix_and_keeps_it():
    prompt = [1, 2, 3, 4, 5, 6]
    gen, slots, context = admitted([[1, 9, 9], [1, 2, 3, 4, 8, 8, 8], [1, 2, 7]], prompt)
    assert gen.slot is slots[1] and slots[1].generation is gen
    assert slots[1].n == 4 and context.cells[1] == {0, 1, 2, 3}  # the shared prefix kept, the rest dropped
    assert gen.call.stats.prefill_tokens == 2
    # the prompt written once into the slot's buffer, which slot 1's drafter (spawned from the
    # model's) was bound to before, and indexes
    assert slots[1].tokens[: len(prompt)].tolist() == prompt
    assert gen.drafter.bound[0] is slots[1].tokens and gen.drafter.bound[1] == prompt
    assert gen.drafter.covered == [len(prompt)] and gen.prompt_length == len(prompt)
    assert [s.n for s in (slots[0], slots[2])] == [3, 3]  # the others untouched


def test_admission_decodes_a_whole_cached_prompt_s_last_token_again():
    gen, slots, context = admitted([[5, 6, 7]], [5, 6, 7])
    assert gen.slot.n == 2 and context.cells[0] == {0, 1} and gen.call.stats.prefill_tokens == 1


# -- verdicts


class Rows:
    """A sampler whose row i holds the token `tokens[i]` (greedy: no randomness)."""

    def __init__(self, tokens):
        self.tokens = tokens

    def sample(self, ctx, row):
        return self.tokens[row]


def judged(draft: list[int], target: list[int], roll_back_error: int = 0):
    """(context, slot, accepted) after a verdict on pending token 50 + `draft` at n_past 5, the
    target's tokens per row `target`; `roll_back_error` breaks the roll-back rule (the control)."""
    context = FakeContext()
    slot = slot_holding(0, [10, 11, 12, 13, 14], context)
    slot.tokens[5] = 50  # the pending token, after the cells
    gen = SimpleNamespace(slot=slot, call=call(), drafter=Drafter(), sampler=Rows(target), randomly=False,
                          stopping_criteria=None, out=[], emitted=0, done=False)
    rows = [(token, 5 + i, (0,)) for i, token in enumerate([50, *draft])]
    context.fill(rows)
    context.decode()
    if roll_back_error:
        roll_back = context.roll_back
        context.roll_back = lambda seq, n: roll_back(seq, n + roll_back_error)
    verdicts = Verdicts(context, accept, rebuild=lambda slot, n: pytest.fail("the memory never refuses here"))
    accepted = verdicts.verdict(gen, Draft(np.asarray(draft, dtype=np.int32), 2, REQUEST), 0)
    return context, slot, gen, accepted


def test_a_verdict_rolls_back_the_rejected_draft_tokens_to_n_past_plus_1_plus_accepted():
    context, slot, gen, accepted = judged([60, 61, 62, 63], target=[60, 61, 70, 0, 0])
    assert accepted == 2 and gen.out == [60, 61, 70]
    assert context.roll_backs == [(0, 5 + 1 + 2)]
    assert slot.n == 8 and context.cells[0] == set(range(8))  # the prompt, the pending token, 2 accepted
    # the emitted tokens written once, the new pending one after the cells, no rejected draft token
    assert slot.tokens[:10].tolist() == [10, 11, 12, 13, 14, 50, 60, 61, 70, 0]
    assert gen.drafter.covered == [9]
    # all accepted: nothing to drop
    context, slot, gen, accepted = judged([60, 61], target=[60, 61, 62])
    assert accepted == 2 and context.roll_backs == [] and context.cells[0] == set(range(8))


def test_where_the_memory_refuses_the_roll_back_the_sequence_is_rebuilt_from_the_verified_tokens():
    context = FakeContext()
    slot = slot_holding(0, [10, 11, 12, 13, 14], context)
    slot.tokens[5] = 50
    gen = SimpleNamespace(slot=slot, call=call(), drafter=Drafter(), sampler=Rows([60, 61, 70, 0, 0]), randomly=False,
                          stopping_criteria=None, out=[], emitted=0, done=False)
    context.fill([(token, 5 + i, (0,)) for i, token in enumerate([50, 60, 61, 62, 63])])
    context.decode()
    context.roll_back = lambda seq, n: False  # a recurrent memory: no suffix dropped
    rebuilt = []
    verdicts = Verdicts(context, accept, rebuild=lambda slot, n: rebuilt.append(slot.tokens[:n].tolist()))
    assert verdicts.verdict(gen, Draft(np.asarray([60, 61, 62, 63], dtype=np.int32), 2, REQUEST), 0) == 2
    assert rebuilt == [[10, 11, 12, 13, 14, 50, 60, 61]]  # the emitted tokens in the buffer before it reads them


def test_control_a_roll_back_that_keeps_a_rejected_token_is_caught():
    context, slot, _, accepted = judged([60, 61, 62, 63], target=[60, 61, 70, 0, 0], roll_back_error=1)
    assert accepted == 2 and slot.n == 8
    assert context.cells[0] != set(range(slot.n))  # a stale cell: the check above would fail


# -- the step


class Recorded:
    """Verdicts that record each generation's first row."""

    def __init__(self):
        self.starts, self.first_rows = {}, {}

    def verdict(self, gen, draft, start):
        self.starts[gen.slot.seq] = (start, len(draft))
        return 0

    def first_token(self, gen, row):
        self.first_rows[gen.slot.seq] = row


def generation(slot, prompt, pending=None, draft=()):
    """A generation on `slot` as admission leaves it (its prompt in the slot's buffer), decoding
    with `pending` after the prompt where one is given."""
    slot.tokens[: len(prompt)] = prompt
    if pending is not None:
        slot.n, slot.tokens[len(prompt)] = len(prompt), pending
    return Generation(slot, call(), Drafter(draft), None, False, None, len(prompt))


def test_the_step_puts_each_generations_rows_together_in_sequence_order():
    """Slot 2 decodes (pending token and a draft of 3), slot 0 prefills a prompt of 3 tokens, slot
    1 is idle: its rows, then none, then slot 2's; each judged from its own first row."""
    context = FakeContext()
    slots = [slot_holding(i, [], context) for i in range(3)]
    decoding = generation(slots[2], [1, 2], pending=7, draft=[8, 9, 10])
    context.hold(2, 2)
    prefilling = generation(slots[0], [4, 5, 6])
    slots[2].generation, slots[0].generation = decoding, prefilling
    verdicts = Recorded()
    model = SimpleNamespace(can_roll_back=True, drafter=SimpleNamespace(policy=SimpleNamespace(cost=np.ones(64))))
    step = Step(context, slots, verdicts, model)
    step.run()
    assert [(token, position, seqs[0]) for token, position, seqs in context.rows] == [
        (4, 0, 0), (5, 1, 0), (6, 2, 0),  # slot 0's chunk
        (7, 2, 2), (8, 3, 2), (9, 4, 2), (10, 5, 2),  # slot 2's pending token and draft
    ]
    assert context.logits == [False, False, True, True, True, True, True]  # a chunk's last row; every verify row
    assert verdicts.starts == {2: (3, 3)} and verdicts.first_rows == {0: 2}
    assert slots[0].n == 3 and step.steps == 1 and step.rows == 7


def test_a_verdict_on_a_predictions_draft_counts_no_memory_or_corpus_acceptance():
    context = FakeContext()
    slot = slot_holding(0, [10, 11, 12, 13, 14], context)
    slot.tokens[5] = 50
    gen = SimpleNamespace(slot=slot, call=call(), drafter=Drafter(), sampler=Rows([60, 61, 62]), randomly=False,
                          stopping_criteria=None, out=[], emitted=0, done=False)
    context.fill([(token, 5 + i, (0,)) for i, token in enumerate([50, 60, 61])])
    context.decode()
    verdicts = Verdicts(context, accept, rebuild=lambda slot, n: pytest.fail("the memory never refuses here"))
    assert verdicts.verdict(gen, Draft(np.asarray([60, 61], dtype=np.int32), 4, PREDICTION), 0) == 2
    stats = gen.call.stats
    assert (stats.accepted, stats.accepted_from_memory, stats.accepted_from_corpus) == (2, 0, 0)


# -- the slot's buffer: the one copy of a generation's history


SENTINEL = 7777  # in the buffer where nothing was written


class Target:
    """A model that writes `text`: at every row, the token after the row's position."""

    def __init__(self, context: FakeContext, text: list[int]):
        self.context, self.text = context, text

    def sample(self, ctx, row):
        return self.text[self.context.rows[row][1] + 1]


class Buffered(list):
    """A step trace that checks, as each step ends, that the slot's buffer holds the prompt and the
    tokens emitted so far (the newest, pending, after the cells), written nowhere else, and that
    the drafter's index reads that very buffer, all of it and nothing more."""

    def __init__(self, slot: Slot, text: list[int]):
        super().__init__()
        self.slot, self.text, self.problems = slot, text, []

    def append(self, record) -> None:
        super().append(record)
        slot, gen = self.slot, self.slot.generation
        end = gen.prompt_length + gen.emitted  # prompt + output
        index = gen.drafter.index
        if slot.tokens[:end].tolist() != self.text[:end]:
            self.problems.append(f"step {len(self)}: tokens[:{end}] are not the prompt and output")
        if (slot.tokens[end:] != SENTINEL).any():
            self.problems.append(f"step {len(self)}: written past the newest token: {slot.tokens[end:end + 8]}")
        if gen.emitted and slot.n != end - 1:
            self.problems.append(f"step {len(self)}: n = {slot.n}, not {end - 1} (the pending token's position)")
        if not (index.bound_to(slot.tokens) and index.tokens.base is slot.tokens and len(index) == end):
            self.problems.append(f"step {len(self)}: the index does not read the buffer's {end} tokens")


def one_slot_engine(text: list[int], n_ctx: int = 64, drafter=None):
    """Admission, step and verdicts over one slot of a fake context whose model writes `text`."""
    context = FakeContext(n_ctx=n_ctx)
    slot = Slot(0, 0, -1, Cells(n_ctx))
    slot.tokens[:] = SENTINEL
    drafter = drafter or SuffixDrafter()
    drafter.branches = False  # (the fake context has no branch sequences)
    model = SimpleNamespace(drafter=drafter, can_roll_back=True)
    verdicts = Verdicts(context, accept, rebuild=lambda slot, n: pytest.fail("the memory never refuses here"))
    step = Step(context, [slot], verdicts, model)
    admission = Admission(context, [slot], Chains(), model, step.run)
    return admission, step, slot, Target(context, text)


# A text that copies itself, but not always: drafts accepted whole, and cut short.
PIECE = list(range(100, 112))
COPYING = [*PIECE, *PIECE[:6], 90, *PIECE, 91, *PIECE[:8], 92, *PIECE, *PIECE]


def test_each_step_writes_the_emitted_tokens_once_and_the_drafter_reads_them_there():
    prompt = COPYING[:15]
    admission, step, slot, target = one_slot_engine(COPYING)
    step.trace = trace = Buffered(slot, COPYING)
    gen = admission.wait_for_slot(prompt, call(max_tokens=40), target, randomly=False, stopping_criteria=None)
    assert slot.tokens[:15].tolist() == prompt and (slot.tokens[15:] == SENTINEL).all()  # admission wrote the prompt
    tokens = admission.tokens(gen)
    out = list(itertools.islice(tokens, 40))  # as llama_cpp's completion takes max_tokens
    tokens.close()
    assert out == COPYING[15:55] and trace.problems == []
    stats = gen.call.stats
    assert 0 < stats.accepted < stats.drafted  # drafts verified whole and cut short: rejected tokens never written
    assert len(trace) < 40  # ... and several tokens a step


def test_where_the_context_is_exactly_full_the_newest_token_is_the_buffers_last():
    """prompt + output = n_ctx, as llama_cpp caps it: the buffer holds them all, the cells all but
    the newest, which has no cell; the index covers the whole buffer, never past it."""
    n_ctx = 24
    prompt = COPYING[:10]
    admission, step, slot, target = one_slot_engine(COPYING, n_ctx)
    step.trace = trace = Buffered(slot, COPYING)
    gen = admission.wait_for_slot(prompt, call(), target, randomly=False, stopping_criteria=None)
    out = list(admission.tokens(gen))  # until the context is full
    assert out == COPYING[10:n_ctx] and trace.problems == []
    assert gen.call.stats.accepted > 0 and slot.n <= n_ctx - 1
    assert slot.tokens.tolist() == COPYING[:n_ctx] and len(gen.drafter.index) == n_ctx


def test_slot_0s_drafter_starts_over_where_another_drafter_or_llama_cpp_wrote_its_buffer():
    """The buffer is compared with a new prompt to keep what the drafter indexed; where another
    drafter (the user set one, then the first back) or llama_cpp's own eval wrote the buffer since,
    it may say yes for other tokens than those indexed: the drafter starts over instead."""
    first = [1, 2, 3, 4, 5, 6, 7, 8]
    other = [9, 9, 5, 6, 9, 9, 9, 9, 9, 9]  # written over the first, then repeated by the next prompt
    again = [*other, 5]  # "5" follows "9 9" in `other`; in the stale index, "5 6" in `first`

    def stale_or_fresh(write_other):
        admission, _, slot, _ = one_slot_engine([])
        drafter = admission.model.drafter
        admission.release(admission.wait_for_slot(first, call(), None, randomly=False, stopping_criteria=None))
        write_other(admission, slot)
        gen = admission.wait_for_slot(again, call(), None, randomly=False, stopping_criteria=None)
        assert gen.drafter is drafter and drafter.index.tokens.tolist() == again
        fresh = SuffixIndex()
        fresh.extend(again)
        return drafter.index.match() == fresh.match() and drafter.index.continuation(4)[0].tolist() == fresh.continuation(4)[0].tolist()

    def another_drafter(admission, slot):
        own = admission.model.drafter
        admission.model.drafter = SuffixDrafter()
        admission.release(admission.wait_for_slot(other, call(), None, randomly=False, stopping_criteria=None))
        admission.model.drafter = own

    def llama_cpps_eval(admission, slot):  # what plookup.Llama's eval does before llama_cpp's
        admission.rewritten()
        slot.tokens[: len(other)] = other

    def llama_cpps_own_loop(admission, slot):
        with admission.exclusive():
            slot.tokens[: len(other)] = other

    def load_state(admission, slot):  # input_ids replaced: the same tokens in another array
        tokens = slot.tokens.copy()
        tokens[: len(other)] = other
        slot.cells.tokens = tokens

    for write_other in (another_drafter, llama_cpps_eval, llama_cpps_own_loop, load_state):
        assert stale_or_fresh(write_other), write_other.__name__
