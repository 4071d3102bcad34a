"""Filling llama_cpp.Llama's own llama_batch with logits at every row, as a verify step needs them.

llama_cpp's own set_batch only asks for the last row's logits (or all, via logits_all).
"""

from __future__ import annotations

from typing import Sequence

import llama_cpp

Row = tuple[int, int, tuple[int, ...]]  # token, position, sequence ids


def fill(llm: llama_cpp.Llama, rows: Sequence[Row]) -> None:
    batch = llm._batch.batch
    batch.n_tokens = len(rows)
    for i, (token, pos, seq_ids) in enumerate(rows):
        batch.token[i] = token
        batch.pos[i] = pos
        for j, seq in enumerate(seq_ids):
            batch.seq_id[i][j] = seq
        batch.n_seq_id[i] = len(seq_ids)
        batch.logits[i] = True


def sequence_rows(tokens: Sequence[int], n_past: int) -> list[Row]:
    """`tokens` at positions n_past.. of sequence 0."""
    return [(int(token), n_past + i, (0,)) for i, token in enumerate(tokens)]


def verify_rows(pending: int, draft: Sequence[int], branch, n_past: int) -> list[Row]:
    """The rows of a verify step in the order :mod:`plookup.verify` reads them.

    Without a branch: pending + draft on sequence 0. With one (a :class:`~plookup.draft.Branch`):
    pending + draft[:at] on sequences 0 and 1, then draft[at:] on 0 and the branch's tokens on 1,
    each at the positions after the shared part.
    """
    if branch is None:
        return sequence_rows([pending, *draft], n_past)
    shared = [pending, *draft[: branch.at]]
    rows = [(int(token), n_past + i, (0, 1)) for i, token in enumerate(shared)]
    for seq, tokens in ((0, draft[branch.at :]), (1, branch.tokens)):
        rows += [(int(token), n_past + len(shared) + j, (seq,)) for j, token in enumerate(tokens)]
    return rows

