"""The step's batch order and its gap fillers (plookup.engine.step), without a model: llama.cpp
splits a batch over KV streams into ubatches of consecutive sequences, in the order it meets them
(llama_batch_allocr::split_equal), so the rows go in sequence order and a slot idle between two
stepped ones gets one throwaway row."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from plookup.draft.sizing import gaps_worth_filling
from plookup.engine.step import Piece, Step
from plookup.verify.rows import sequence_rows

# a step's cost in single decodes by its rows, as on 2 cores (8 rows in one pass: 2.4 decodes)
CPU = np.array([1.0, 1.2, 1.4, 1.6, 1.8, 2.0, 2.2, 2.4])


def piece(owner, seq, tokens, n_past=0):
    return Piece(owner, None, sequence_rows(tokens, n_past, seq), [True] * len(tokens))


def test_rows_go_in_sequence_order_and_each_piece_knows_its_first_row():
    pieces = [piece("c", 2, [5, 6]), piece("a", 0, [1]), piece("b", 1, [2, 3, 4])]
    rows, logits, starts = Step._batch(pieces)
    assert [r[2][0] for r in rows] == [0, 1, 1, 1, 2, 2]
    assert starts == [4, 0, 1]  # in the pieces' own order
    assert [rows[s][0] for s in starts] == [5, 1, 2] and len(logits) == len(rows)


def fake_engine(ns: list[int]):
    slots = [SimpleNamespace(seq=i, n=n, tokens=np.arange(100, 110)) for i, n in enumerate(ns)]
    llm = SimpleNamespace(drafter=SimpleNamespace(policy=SimpleNamespace(cost=CPU)))
    return SimpleNamespace(slots=slots, _room=lambda slot: 10 - slot.n - 2, llm=llm)


def test_a_gap_is_filled_where_one_pass_costs_less_than_two():
    assert gaps_worth_filling([0, 2], CPU) == [1]  # 3 rows 1.4 against 1 + 1
    assert gaps_worth_filling([0, 1, 2, 4, 5, 6, 7], CPU) == [3]  # the 7-of-8 tail: 2.4 against 1.4 + 1.6
    assert gaps_worth_filling([0, 7], CPU) == []  # 8 rows 2.4 against 1 + 1: two small passes
    assert gaps_worth_filling([0, 1, 2, 3, 4, 7], CPU) == [5, 6]  # 2.4 against 1.8 + 1
    assert gaps_worth_filling([3, 1, 2], CPU) == [] and gaps_worth_filling([], CPU) == []
    assert gaps_worth_filling([0, 2], np.arange(1.0, 9.0)) == []  # rows that cost their count: never
    assert gaps_worth_filling([0, 7], np.ones(8)) == list(range(1, 7))  # a flat curve: always


def stepped(*seqs):
    return [SimpleNamespace(slot=SimpleNamespace(seq=s)) for s in seqs]


def test_only_slots_between_stepped_ones_get_a_filler_behind_their_cells():
    engine = fake_engine([3, 4, 0, 2, 5])
    fillers = Step._gap_fillers(engine, stepped(0, 3))  # 4 rows 1.6 against 1 + 1
    assert [(slot.seq, rows) for slot, _, rows, _ in fillers] == [(1, [(103, 4, (1,))]), (2, [(0, 0, (2,))])]
    assert all(logits == [False] for *_, logits in fillers)  # nothing read from them
    assert Step._gap_fillers(engine, stepped(1, 2, 3)) == []  # consecutive: nothing to close
    assert Step._gap_fillers(engine, stepped(4)) == []
    # a gap where a slot's context is full stays (a row behind it would not fit)
    full = fake_engine([3, 9, 2])
    assert Step._gap_fillers(full, stepped(0, 2)) == []


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
        llm = SimpleNamespace(can_roll_back=True, n_batch=512, drafter=SimpleNamespace(policy=SimpleNamespace(cost=QWEN_COST)))
        engine = SimpleNamespace(llm=llm, streams=streams, _draft_limit=lambda gen, n, reserve: 16)
        gens = [generation(seq, offers) for seq, offers in enumerate(offering)]
        return [len(d) for d in Step._drafts(engine, gens, reserve=0)]

    together, apart = lengths(True, [True, True, False]), lengths(True, [True, False, True])
    assert together[0] > 0 and together == [together[0], together[0], 0]
    assert apart == [0, 0, 0]
    unified = lengths(False, [True, False, True])
    assert unified[0] > 0 and unified == [unified[0], 0, unified[0]]
