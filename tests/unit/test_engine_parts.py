"""The engine's parts, each alone, against a fake context handle (no model): admission hands a
request the free slot whose cells share the longest prefix with its prompt and keeps that prefix;
a verdict leaves its sequence holding exactly n_past + 1 + accepted cells (a broken roll-back is
caught: the control); the step puts each generation's rows together, in sequence order, and
judges each from its own first row."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from plookup.api.stats import SpecStats
from plookup.draft.values import REQUEST, Draft, Speculative
from plookup.engine.admission import Admission
from plookup.engine.slot import Cells, Slot
from plookup.engine.step import Step
from plookup.engine.verdicts import Verdicts
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
        self.started, self.extended = None, []

    def start(self, history):
        self.started = list(history)

    def propose(self, limit):
        return self.draft

    def observe(self, path, accepted):
        pass

    def observe_sampling(self, samples, most_likely):
        pass

    def extend(self, tokens):
        self.extended += tokens.tolist()

    def spawn(self):
        return Drafter()


def call(**fields):
    return SimpleNamespace(stats=SpecStats(), prediction=[], memory=None, cache_reuse=None, logprobs=None,
                           max_tokens=None, speculative=Speculative(), last_token_alone=False,
                           is_cancelled=lambda: False, **fields)


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
    admission = Admission(context, slots, Chains(), SimpleNamespace(drafter=drafter), step=lambda: None)
    gen = admission.admit(prompt, call(), sampler=None, randomly=False, stopping_criteria=None)
    return gen, slots, context


def test_admission_hands_the_slot_with_the_longest_shared_prefix_and_keeps_it():
    prompt = [1, 2, 3, 4, 5, 6]
    gen, slots, context = admitted([[1, 9, 9], [1, 2, 3, 4, 8, 8, 8], [1, 2, 7]], prompt)
    assert gen.slot is slots[1] and slots[1].generation is gen
    assert slots[1].n == 4 and context.cells[1] == {0, 1, 2, 3}  # the shared prefix kept, the rest dropped
    assert gen.call.stats.prefill_tokens == 2
    assert gen.drafter.started == prompt  # slot 1's drafter, spawned from the model's
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
    gen = SimpleNamespace(slot=slot, call=call(), drafter=Drafter(), sampler=Rows(target), randomly=False,
                          stopping_criteria=None, pending=50, out=[], emitted=0, done=False)
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
    assert accepted == 2 and gen.out == [60, 61, 70] and gen.pending == 70
    assert context.roll_backs == [(0, 5 + 1 + 2)]
    assert slot.n == 8 and context.cells[0] == set(range(8))  # the prompt, the pending token, 2 accepted
    assert slot.tokens[:8].tolist() == [10, 11, 12, 13, 14, 50, 60, 61]
    # all accepted: nothing to drop
    context, slot, gen, accepted = judged([60, 61], target=[60, 61, 62])
    assert accepted == 2 and context.roll_backs == [] and context.cells[0] == set(range(8))


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
    return SimpleNamespace(slot=slot, call=call(), drafter=Drafter(draft), prompt=prompt, pending=pending,
                           out=[], done=False, emitted=0, shared=False, prefilling=pending is None)


def test_the_step_puts_each_generations_rows_together_in_sequence_order():
    """Slot 2 decodes (pending token and a draft of 3), slot 0 prefills a prompt of 3 tokens, slot
    1 is idle: its rows, then none, then slot 2's; each judged from its own first row."""
    context = FakeContext()
    slots = [slot_holding(i, [], context) for i in range(3)]
    decoding = generation(slots[2], [1, 2], pending=7, draft=[8, 9, 10])
    slots[2].tokens[:2], slots[2].n = [1, 2], 2
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
