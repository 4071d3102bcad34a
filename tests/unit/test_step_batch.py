"""The step's batch order and its gap fillers (plookup.engine.step), without a model: llama.cpp
splits a batch over KV streams into ubatches of consecutive sequences, in the order it meets them
(llama_batch_allocr::split_equal), so the rows go in sequence order and a slot idle between two
stepped ones gets one throwaway row."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plookup.draft.sizing import fillers_worth_adding, streams_step_cost
from plookup.engine.step import Piece, Step, batch
from plookup.verify.rows import sequence_rows

# a step's cost in single decodes by its rows, as on 2 cores (8 rows in one pass: 2.4 decodes)
CPU = np.array([1.0, 1.2, 1.4, 1.6, 1.8, 2.0, 2.2, 2.4])


def piece(slot, seq, tokens, n_past=0):
    return Piece(slot, sequence_rows(tokens, n_past, seq), [True] * len(tokens))


def test_rows_go_in_sequence_order_and_each_piece_knows_its_first_row():
    pieces = [piece("c", 2, [5, 6]), piece("a", 0, [1]), piece("b", 1, [2, 3, 4])]
    rows, logits, starts = batch(pieces)
    assert [r[2][0] for r in rows] == [0, 1, 1, 1, 2, 2]
    assert starts == [4, 0, 1]  # in the pieces' own order
    assert [rows[s][0] for s in starts] == [5, 1, 2] and len(logits) == len(rows)


def fake_engine(ns: list[int]) -> Step:
    """The step over slots holding `ns` tokens, in a context of 10 (a slot of 8 or more is full)."""
    slots = [SimpleNamespace(seq=i, n=n, tokens=np.arange(100, 110)) for i, n in enumerate(ns)]
    model = SimpleNamespace(drafter=SimpleNamespace(policy=SimpleNamespace(cost=CPU)))
    return Step(SimpleNamespace(n_ctx=10, n_batch=512), slots, None, model, streams=True)


EIGHT = list(range(8))


def idle(*stepped, slots=EIGHT):
    return [seq for seq in slots if seq not in stepped]


def test_a_gap_is_filled_where_one_pass_costs_less_than_two():
    def fill(stepped, cost=CPU):
        return fillers_worth_adding(stepped, idle(*stepped), cost)

    assert fill([0, 2]) == [1]  # 3 rows 1.4 against 1 + 1
    assert fill([0, 1, 2, 4, 5, 6, 7]) == [3]  # the 7-of-8 tail: 2.4 against 1.4 + 1.6
    assert fill([0, 7]) == []  # 8 rows 2.4 against 1 + 1: two small passes
    assert fill([0, 1, 2, 3, 4, 7]) == [5, 6]  # 2.4 against 1.8 + 1
    assert fill([3, 1, 2]) == [] and fill([]) == []  # a rising curve: never beside a run
    assert fill([0, 2], np.arange(1.0, 9.0)) == []  # rows that cost their count: never
    assert fill([0, 7], np.ones(8)) == list(range(1, 7))  # a flat curve: between, never beside
    # a sequence that is not idle (a full context, a branch) ends a run: no filling across it
    assert fillers_worth_adding([0, 2], [3], CPU) == []


# Qwen 0.5B Q8_0 on this machine's portable build (the measured curve's first 8): odd counts slow
ODD_SLOW = np.array([1.0, 3.44, 5.27, 2.34, 2.86, 2.5, 3.54, 3.11])


def test_a_row_beside_a_run_is_added_where_the_longer_run_costs_less():
    """3 rows cost 5.27 decodes, 4 rows 2.34: a slot idle beside three stepped ones gets a row
    (the 4-slot batch's tail); two stepped get two (4 rows against 3.44); 7 get the eighth."""
    assert fillers_worth_adding([0, 1, 2], [3], ODD_SLOW) == [3]
    assert fillers_worth_adding([1, 2, 3], [0], ODD_SLOW) == [0]
    assert fillers_worth_adding([0, 1], [2, 3], ODD_SLOW) == [2, 3]
    assert fillers_worth_adding([0, 1, 2, 3, 4, 6, 7], [5], ODD_SLOW) == [5]
    assert fillers_worth_adding([0, 1, 2, 4, 5, 6], [3, 7], ODD_SLOW) == [3, 7]  # 8 rows 3.11
    assert fillers_worth_adding([0], [1, 2, 3], ODD_SLOW) == []  # one row is the cheapest pass


def brute_force_fillers(stepped, free, cost):
    """(cost, fillers): the cheapest subset of `free`, the smallest on a tie."""
    best = None
    for k in range(len(free) + 1):
        for chosen in itertools.combinations(free, k):
            seqs = sorted(set(stepped) | set(chosen))
            spent = streams_step_cost([1] * len(seqs), cost, seqs)
            if best is None or spent < best[0] - 1e-9:
                best = (spent, list(chosen))
    return best


@settings(max_examples=200, deadline=None)
@given(roles=st.lists(st.sampled_from("sif"), min_size=1, max_size=9),
       cost=st.lists(st.floats(0.3, 4.0), min_size=8, max_size=8))
def test_the_fillers_are_the_cheapest_subset(roles, cost):
    """Against every subset of the idle sequences (s: stepped, i: idle, f: neither), on curves of
    any shape: the fillers chosen cost what the cheapest subset costs, with as few rows."""
    cost = np.array([1.0] + cost)
    stepped = [seq for seq, role in enumerate(roles) if role == "s"]
    free = [seq for seq, role in enumerate(roles) if role == "i"]
    chosen = fillers_worth_adding(stepped, free, cost)
    if not stepped:
        assert chosen == []
        return
    assert set(chosen) <= set(free)
    spent = streams_step_cost([1] * (len(stepped) + len(chosen)), cost, sorted(stepped + chosen))
    cheapest, fewest = brute_force_fillers(stepped, free, cost)
    assert spent == pytest.approx(cheapest, abs=1e-9) and len(chosen) == len(fewest)


def stepped(*seqs):
    return [SimpleNamespace(slot=SimpleNamespace(seq=s)) for s in seqs]


def test_idle_slots_get_a_filler_behind_their_cells():
    engine = fake_engine([3, 4, 0, 2, 5])
    fillers = engine._fillers(stepped(0, 3))  # 4 rows 1.6 against 1 + 1
    assert [(slot.seq, rows) for slot, rows, _ in fillers] == [(1, [(103, 4, (1,))]), (2, [(0, 0, (2,))])]
    assert all(logits == [False] for *_, logits in fillers)  # nothing read from them
    assert engine._fillers(stepped(1, 2, 3)) == []  # consecutive, on a rising curve: nothing
    assert engine._fillers(stepped(4)) == []
    noisy = fake_engine([3, 4, 0, 2])
    noisy.model.drafter.policy.cost = np.array([1.0, 0.9, 1.2, 1.3])  # 2 rows "cheaper" than 1: noise
    assert noisy._fillers(stepped(0)) == []  # a lone generation steps alone
    assert [slot.seq for slot, *_ in noisy._fillers(stepped(0, 2))] == [1]
    # a slot whose context is full takes no row (one behind it would not fit)
    full = fake_engine([3, 9, 2])
    assert full._fillers(stepped(0, 2)) == []
    # beside a run, where the curve makes the longer run cheaper
    odd = fake_engine([3, 4, 0, 2])
    odd.model.drafter.policy.cost = ODD_SLOW
    assert [slot.seq for slot, *_ in odd._fillers(stepped(0, 1, 2))] == [3]


QWEN_COST = np.interp(np.arange(1, 69), [1, 4, 8, 16, 32, 64, 68], [1.0, 1.57, 2.33, 3.98, 7.44, 13.7, 14.6])


def test_drafts_are_sized_by_the_split_of_their_own_sequences():
    """Three slots stepping, two of them offering a likely draft of 8: on neighbouring sequences,
    or with the third's sequence between them. With a KV stream per slot the step sizes them for
    llama.cpp's split of those sequences (draft where one ubatch takes both, not at all where each
    would be a pass of its own); in one unified cache the order does not matter."""
    from plookup.draft.values import NO_CANDIDATE, Candidate, Speculative

    likely = np.cumprod(np.full(8, 0.86))
    candidate = Candidate(np.arange(8, dtype=np.int32), np.ones(8), 8, "request")

    def generation(seq, offers):
        offer = (candidate, likely) if offers else (NO_CANDIDATE, np.zeros(0))
        call = SimpleNamespace(speculative=Speculative(), stats=SimpleNamespace(draft_seconds=0.0))
        return SimpleNamespace(slot=SimpleNamespace(seq=seq), drafter=SimpleNamespace(offer=lambda limit: offer), call=call)

    def lengths(streams, offering):
        model = SimpleNamespace(can_roll_back=True, drafter=SimpleNamespace(policy=SimpleNamespace(cost=QWEN_COST)))
        step = Step(SimpleNamespace(n_batch=512, n_ctx=4096), [], None, model, streams=streams)
        step._draft_limit = lambda gen, n, reserve: 16
        gens = [generation(seq, offers) for seq, offers in enumerate(offering)]
        return [len(d) for d in step._drafts(gens, [], [])]

    together, apart = lengths(True, [True, True, False]), lengths(True, [True, False, True])
    assert together[0] > 0 and together == [together[0], together[0], 0]
    assert apart == [0, 0, 0]
    unified = lengths(False, [True, False, True])
    assert unified[0] > 0 and unified == [unified[0], 0, unified[0]]
