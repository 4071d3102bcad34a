"""Filling llama_cpp.Llama's own llama_batch for one sequence with logits at every position."""

from __future__ import annotations

import llama_cpp


def fill_batch(llm: llama_cpp.Llama, tokens: list[int], n_past: int) -> None:
    """Put `tokens` at positions n_past.. of sequence 0 in `llm._batch`, each asking for logits.

    A verify step needs the target's distribution after every draft token, so every row is an
    output row; llama_cpp's own set_batch only asks for the last one (or all, via logits_all).
    """
    batch = llm._batch.batch
    batch.n_tokens = len(tokens)
    for i, token in enumerate(tokens):
        batch.token[i] = token
        batch.pos[i] = n_past + i
        batch.seq_id[i][0] = 0
        batch.n_seq_id[i] = 1
        batch.logits[i] = True
