"""plookup.engine.reuse: llama-server's chunk reuse by KV shift, on a fake memory that holds a
token per position. After the moves and the roll-back past them, the cells hold exactly the new
prompt's first n tokens, each at its position; the chunks moved are at least N tokens long."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plookup.engine import reuse
from plookup.engine.reuse import Move, apply_moves, shift_plan


class Cells:
    """A sequence's cells: position -> token, as the context handle's ``remove`` and ``shift``
    (llama_memory_seq_rm / _seq_add) edit them."""

    def __init__(self, tokens):
        self.at = dict(enumerate(tokens))

    def remove(self, seq, p0, p1):
        self.at = {p: t for p, t in self.at.items() if not p0 <= p < (p1 if p1 >= 0 else 1 << 62)}
        return True

    def shift(self, seq, p0, p1, delta):
        moved = {p + delta: t for p, t in self.at.items() if p0 <= p < p1}
        kept = {p: t for p, t in self.at.items() if not p0 <= p < p1}
        assert not set(moved) & set(kept), "a chunk moved onto cells still held"
        self.at = {**kept, **moved}


def reused(cached: list[int], prompt: list[int], min_chunk: int) -> tuple[int, list[Move], Cells]:
    """(positions held, the moves, the cells) after llama-server's walk from the common prefix."""
    cells = Cells(cached)
    start = next((i for i, (a, b) in enumerate(zip(cached, prompt)) if a != b), min(len(cached), len(prompt)))
    tokens = np.array(cached + [0] * len(prompt), dtype=np.int32)
    moves = shift_plan(cached, prompt, start, min_chunk)
    held = apply_moves(cells, 0, tokens, moves) if moves else start
    cells.remove(0, held, -1)  # the admission's roll-back past what is kept
    assert tokens[:held].tolist() == prompt[:held]  # the slot's tokens follow the cells
    return held, moves, cells


def edited(rng: random.Random, text: list[int]) -> list[int]:
    """`text` as an editor's next request: lines inserted, dropped, the window moved."""
    out = list(text)
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(out) + 1)
        if rng.random() < 0.5:
            out[at:at] = [rng.randrange(50) for _ in range(rng.randint(1, 20))]
        else:
            del out[at : at + rng.randint(1, 30)]
    return out[rng.randint(0, 10):]


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 10**9), st.sampled_from([1, 4, 16, 64]))
def test_the_cells_hold_the_new_prompts_first_tokens_each_at_its_position(seed, min_chunk):
    rng = random.Random(seed)
    cached = [rng.randrange(50) for _ in range(rng.randint(0, 300))]
    prompt = edited(rng, cached)
    held, moves, cells = reused(cached, prompt, min_chunk)
    assert cells.at == {p: prompt[p] for p in range(held)}
    assert all(move.length >= min_chunk and move.prompt <= move.cached for move in moves)
    for before, after in zip(moves, moves[1:]):  # back to back in the prompt, in order in the cells
        assert after.prompt == before.prompt + before.length and after.cached >= before.cached + before.length


def test_chunks_after_a_deletion_are_shifted_and_an_insertion_ends_the_reuse():
    """llama-server's walk skips cached tokens, never prompt tokens: the window's head moved and
    lines deleted are reused; from a line inserted on, the prompt is evaluated (llama.vim's new
    line: the tokens after the cursor)."""
    cached = list(range(100, 400))
    deleted = cached[3:150] + cached[160:]
    held, moves, cells = reused(cached, deleted, 16)
    assert moves == [Move(3, 0, 147), Move(160, 147, 140)]
    assert held == len(deleted) and cells.at == {p: deleted[p] for p in range(held)}
    inserted = cached[3:150] + [7] + cached[150:]
    assert reused(cached, inserted, 16)[:2] == (147, [Move(3, 0, 147)])
    # A chunk shorter than N is evaluated again, not shifted:
    assert reused(cached, deleted, 148)[1] == []


def test_control_a_plan_that_moves_a_chunk_onto_held_cells_is_caught():
    """The fake memory catches a wrong plan: a chunk moved forward lands on cells still held."""
    cells = Cells(list(range(10)))
    with pytest.raises(AssertionError, match="moved onto cells"):
        apply_moves(cells, 0, np.arange(20, dtype=np.int32), [Move(2, 5, 4)])
    assert reuse.shift_plan([1, 2, 3], [1, 2, 3], 3, 1) == []  # nothing after a whole prefix
