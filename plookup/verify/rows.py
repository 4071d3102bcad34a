"""Filling llama_cpp.Llama's own llama_batch: rows of one or several sequences, with logits at
every row a verify step reads.

llama_cpp's own set_batch only asks for the last row's logits (or all, via logits_all).
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import llama_cpp

Row = tuple[int, int, tuple[int, ...]]  # token, position, sequence ids


def fill(batch: llama_cpp.llama_batch, rows: Sequence[Row], logits: Optional[Sequence[bool]] = None) -> None:
    """Rows into `batch` (a llama_cpp.Llama's is ``llm._batch.batch``); logits at every row, or
    where `logits` says."""
    batch.n_tokens = len(rows)
    for i, (token, pos, seq_ids) in enumerate(rows):
        batch.token[i] = token
        batch.pos[i] = pos
        for j, seq in enumerate(seq_ids):
            batch.seq_id[i][j] = seq
        batch.n_seq_id[i] = len(seq_ids)
        batch.logits[i] = True if logits is None else logits[i]


def sequence_rows(tokens: Sequence[int], n_past: int, seq: int = 0) -> list[Row]:
    """`tokens` at positions n_past.. of sequence `seq`."""
    return [(int(token), n_past + i, (seq,)) for i, token in enumerate(tokens)]


def last_row_logits(n: int) -> list[bool]:
    """Logits at a chunk's last row only, as llama_cpp's ``eval`` asks for them."""
    return [False] * (n - 1) + [True]


def decode_chunks(decode: Callable[[Sequence[Row], Sequence[bool]], None], tokens: Sequence[int], seq: int,
                  n_batch: int, start: int = 0) -> None:
    """`tokens` at positions start.. of sequence `seq`, decoded as llama_cpp's ``eval`` decodes a
    prompt: n_batch tokens a ``llama_decode``, logits at each one's last row. `decode(rows,
    logits)` fills a batch with the rows and decodes it."""
    for i in range(0, len(tokens), n_batch):
        chunk = tokens[i : i + n_batch]
        decode(sequence_rows(chunk, start + i, seq), last_row_logits(len(chunk)))


def verify_rows(pending: int, draft: Sequence[int], branch, n_past: int, seqs: tuple[int, int] = (0, 1)) -> list[Row]:
    """The rows of a verify step in the order :mod:`plookup.verify.accept` reads them.

    Without a branch: pending + draft on sequence seqs[0]. With one (a
    :class:`~plookup.draft.values.Branch`): pending + draft[:at] on both sequences, then draft[at:] on
    seqs[0] and the branch's tokens on seqs[1], each at the positions after the shared part.
    """
    main, fork = seqs
    if branch is None:
        return sequence_rows([pending, *draft], n_past, main)
    shared = [pending, *draft[: branch.at]]
    rows = [(int(token), n_past + i, (main, fork)) for i, token in enumerate(shared)]
    for seq, tokens in ((main, draft[branch.at :]), (fork, branch.tokens)):
        rows += [(int(token), n_past + len(shared) + j, (seq,)) for j, token in enumerate(tokens)]
    return rows

