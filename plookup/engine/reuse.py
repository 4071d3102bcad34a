"""Cached chunks reused by shifting their KV cells, as llama-server's ``--cache-reuse N``.

An editor's requests repeat most of the previous prompt, but not as a prefix: a new line, or a
window that moved, shifts everything after it. After the longest common prefix, llama-server walks
the cached tokens and the new prompt together: where at least N cached tokens match the prompt
from its head on, their cells move to the prompt's positions (``llama_memory_seq_rm`` of the cells
between, ``llama_memory_seq_add`` of the chunk's positions: the context handle's ``remove`` and
``shift``) instead of being evaluated again; elsewhere the cached head steps on by one. llama.cpp
re-rotates a shifted chunk's keys (RoPE) at the next decode: they are not what a fresh prefill
computes, only close (its attention saw other tokens before it), so a reused chunk can change the
text where a fresh prefill would not; usage says how many tokens were shifted
(``stats.shifted_tokens``).
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np


class Move(NamedTuple):
    cached: int  # the chunk's first position in the cells
    prompt: int  # ... and in the new prompt, where it moves to (never after ``cached``)
    length: int


def shift_plan(cached: Sequence[int], prompt: Sequence[int], start: int, min_chunk: int) -> list[Move]:
    """The chunks to move, from position `start` (the common prefix's end) on: llama-server's walk
    (tools/server/server-context.cpp, its n_cache_reuse loop)."""
    moves = []
    head_c = head_p = start
    while head_c < len(cached) and head_p < len(prompt):
        n = 0
        while head_c + n < len(cached) and head_p + n < len(prompt) and cached[head_c + n] == prompt[head_p + n]:
            n += 1
        if n >= min_chunk:
            moves.append(Move(head_c, head_p, n))
            head_c += n
            head_p += n
        else:
            head_c += 1
    return moves


def apply_moves(context, seq: int, tokens: np.ndarray, moves: list[Move]) -> int:
    """Move the chunks' cells of sequence `seq` (and their tokens in `tokens`, the slot's) into
    place, in order, on `context` (a :class:`~plookup.engine.handle.ContextHandle`: its ``remove``
    and ``shift``); returns the positions now held from the start (the prefix and the chunks)."""
    n = moves[0].prompt if moves else 0
    for move in moves:
        context.remove(seq, move.prompt, move.cached)
        context.shift(seq, move.cached, move.cached + move.length, move.prompt - move.cached)
        tokens[move.prompt : move.prompt + move.length] = tokens[move.cached : move.cached + move.length].copy()
        n = move.prompt + move.length
    return n
