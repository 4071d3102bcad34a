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

llama-server's walk never skips a prompt token: a new token before a cached chunk ends the reuse.
That is the editor's common case: llama.vim's window over the file starts a few tokens earlier than
the speculative request's did (its prefix held the suggestion), or a warm-up (``n_predict`` 0) took
the slot's cells after the other files' chunks, so the next request evaluates its whole prefix and
suffix again (1,024 tokens: 7-12 s on 2 cores). Where the context has a spare sequence for it,
:func:`reuse_plan` also skips prompt tokens: each position takes the longest cached chunk of at
least N tokens found there, in the slot's cells or in the cells it kept from an earlier prompt
(:class:`Kept`), else it is evaluated. Llama.cpp decodes a sequence's positions in order, so a
chunk after a new token cannot be moved into place before that token is decoded: the chunks wait
on the slot's branch sequence (unused while a prompt is evaluated), :func:`stage`, each at its
prompt position plus the context's size, and each is brought in once the tokens before it are
in (:func:`place_due`, from the engine's step).
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Sequence

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


# -- chunks from anywhere in the cached cells, new tokens between them


class Take(NamedTuple):
    source: int  # which of the plan's sources holds the chunk
    at: int  # the chunk's first position in that source's cells
    to: int  # ... and in the new prompt
    length: int


class Kept(NamedTuple):
    """Cells a slot keeps from an earlier prompt on a sequence of their own: ``tokens[i]`` at
    position ``first + i`` where ``held[i]``."""

    first: int
    tokens: np.ndarray
    held: np.ndarray  # bool, per token

    @property
    def count(self) -> int:
        return int(self.held.sum())


# Candidate chunks are found by their first ANCHOR tokens (fewer where N is smaller), and at most
# CANDIDATES of them are tried at a prompt position: a text of one token repeated would otherwise
# try every cell at every position.
ANCHOR = 8
CANDIDATES = 64


def reuse_plan(sources: Sequence[tuple[Sequence[int], int, Optional[np.ndarray]]], prompt: Sequence[int],
               start: int, end: int, min_chunk: int) -> list[Take]:
    """The chunks of at least `min_chunk` tokens that `prompt[start:end]` repeats from cached
    cells, in prompt order: at each position the longest chunk any source holds there (cells not
    taken yet; the first source, then the earliest cells, on a tie), else that position is
    evaluated and the walk steps on. `sources`: (tokens, their first position, which are held
    (None: all)) each."""
    anchor = max(1, min(ANCHOR, min_chunk))
    prompt = np.asarray(prompt, dtype=np.int64)
    free, tokens, index = [], [], []
    for source, first, held in sources:
        source = np.asarray(source, dtype=np.int64)
        tokens.append(source)
        free.append(np.ones(len(source), bool) if held is None else np.array(held, bool))
        where: dict = {}
        for i in range(len(source) - anchor + 1):
            where.setdefault(source[i : i + anchor].tobytes(), []).append(i)
        index.append(where)
    takes = []
    p = start
    while p + min_chunk <= end:
        key = prompt[p : p + anchor].tobytes()
        best = None
        for s, ((_, first, _), source) in enumerate(zip(sources, tokens)):
            for i in index[s].get(key, ())[:CANDIDATES]:
                m = min(end - p, len(source) - i)
                same = (source[i : i + m] == prompt[p : p + m]) & free[s][i : i + m]
                n = int(np.argmin(same)) if not same.all() else m
                if n >= min_chunk and (best is None or n > best.length):
                    best = Take(s, first + i, p, n)
        if best is None:
            p += 1
            continue
        i = best.at - sources[best.source][1]
        free[best.source][i : i + best.length] = False
        takes.append(best)
        p += best.length
    return takes


class Placement(NamedTuple):
    to: int  # the prompt position the chunk goes to, once the cells before it are in
    length: int


def stage(context, seqs: Sequence[int], staging: int, takes: list[Take]) -> list[Placement]:
    """Each chunk's cells off its source's sequence (``seqs[take.source]``) onto the `staging`
    sequence, at its prompt position plus the context's size (above every position a slot holds,
    and each chunk's own: the prompt's positions do not overlap). `staging` holds nothing else."""
    for take in takes:
        source, end = seqs[take.source], take.at + take.length
        context.copy(source, staging, take.at, end)
        context.remove(source, take.at, end)
        context.shift(staging, take.at, end, context.n_ctx + take.to - take.at)
    return [Placement(take.to, take.length) for take in takes]


def place_due(context, slot, placements: list[Placement]) -> None:
    """The staged chunks (:func:`stage`, on the slot's branch sequence) whose prompt positions
    follow the cells the slot holds, into its sequence there, in order; each leaves `placements`."""
    while placements and placements[0].to == slot.n:
        to, end = placements[0].to, placements[0].to + placements[0].length
        context.shift(slot.branch_seq, context.n_ctx + to, context.n_ctx + end, -context.n_ctx)
        context.copy(slot.branch_seq, slot.seq, to, end)
        context.remove(slot.branch_seq, to, end)
        slot.n = end
        placements.pop(0)
