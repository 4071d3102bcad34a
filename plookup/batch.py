"""Filling llama_cpp.Llama's own llama_batch for a verify step: logits at every position.

A verify step needs the target's distribution after every draft token, so every row is an output
row; llama_cpp's own set_batch only asks for the last one (or all, via logits_all).
"""

from __future__ import annotations

import llama_cpp

Row = tuple[int, int, tuple[int, ...]]  # token, position, sequence ids


def _fill(llm: llama_cpp.Llama, rows: list[Row]) -> None:
    batch = llm._batch.batch
    batch.n_tokens = len(rows)
    for i, (token, pos, seq_ids) in enumerate(rows):
        batch.token[i] = token
        batch.pos[i] = pos
        for j, seq in enumerate(seq_ids):
            batch.seq_id[i][j] = seq
        batch.n_seq_id[i] = len(seq_ids)
        batch.logits[i] = True


def fill_batch(llm: llama_cpp.Llama, tokens: list[int], n_past: int) -> None:
    """`tokens` at positions n_past.. of sequence 0."""
    _fill(llm, [(token, n_past + i, (0,)) for i, token in enumerate(tokens)])


def fill_two_branch_batch(llm: llama_cpp.Llama, shared: list[int], a: list[int], b: list[int], n_past: int) -> None:
    """`shared` at positions n_past.. on sequences 0 and 1, then `a` on 0 and `b` on 1 at the
    positions after it (rows in that order)."""
    rows = [(token, n_past + i, (0, 1)) for i, token in enumerate(shared)]
    for seq, tokens in ((0, a), (1, b)):
        rows += [(token, n_past + len(shared) + j, (seq,)) for j, token in enumerate(tokens)]
    _fill(llm, rows)
