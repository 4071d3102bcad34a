"""Plain decoding, the reference every output test compares plookup against: greedy tokens with the
top-2 logit gap at each, decoded one token per llama_decode by llama_cpp itself.

The tests' own copy, not plookup.app.bench.plain's (the bench's yardstick is code under test in
tests/unit/test_bench.py): a change there cannot move what the tests compare against. What is not
a reference is imported from the bench once, here: the chat prompt's tokens (llama_cpp's own
templates) and the near-tie threshold per model (measured; its derivation is in
plookup.app.bench.plain).
"""

from __future__ import annotations

import weakref
from typing import Sequence

import llama_cpp
import numpy as np

from plookup.app.bench.plain import NEAR_TIE, chat_prompt_tokens  # noqa: F401 (re-exported)
from plookup.app.bench.workloads import standard_workloads  # noqa: F401 (re-exported)

# 14 code edits, 4 proofreading texts, 6 free-form questions: the output tests' prompt set.
WORKLOADS = standard_workloads(seed=0)
PROMPTS = WORKLOADS[:14] + WORKLOADS[14:18] + WORKLOADS[-6:]


def greedy_with_gaps(
    llm: llama_cpp.Llama, prompt: Sequence[int], max_tokens: int, near_tie: float | None = None, at_least: int = 0
) -> tuple[list[int], list[float]]:
    """Plain greedy decoding, one token per llama_decode, stopping at end-of-generation, and with
    `near_tie` also after the first token chosen by a gap below it once `at_least` are out.

    Returns the tokens and, for each, the gap between the best and second-best logit it was
    chosen from."""
    llm.reset()
    llm.eval(list(prompt))
    tokens: list[int] = []
    gaps: list[float] = []
    for _ in range(max_tokens):
        logits = np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(llm.n_vocab(),))
        token = int(np.argmax(logits))
        second, first = np.partition(logits, -2)[-2:]
        tokens.append(token)
        gaps.append(float(first - second))
        if llama_cpp.llama_vocab_is_eog(llm._model.vocab, token) or llm.n_tokens >= llm.n_ctx():
            break
        if near_tie is not None and len(tokens) >= at_least and min(gaps) < near_tie:
            break
        llm.eval([token])
    llm._requires_eval = True
    return tokens, gaps


# Plain decodings kept per model object and prompt (plain_reference): several tests compare
# against the same model's greedy text for the same prompts.
_decoded: "weakref.WeakKeyDictionary[llama_cpp.Llama, dict]" = weakref.WeakKeyDictionary()


def plain_reference(
    llm: llama_cpp.Llama, prompt: Sequence[int], max_tokens: int, near_tie: float | None = None, at_least: int = 0
) -> tuple[list[int], list[float]]:
    """:func:`greedy_with_gaps`, read off an earlier decoding of the same prompt by the same model
    object where one decoded as far: decoding is deterministic, so a shorter or near-tie-bounded
    decoding is a prefix of a longer one. A decoding is kept unless its near-tie bound cut it short
    (one that met no near-tie, or met it only at its end-of-generation, is the unbounded
    decoding). Leaves `llm`'s cache as it was when nothing is decoded."""
    kept = _decoded.setdefault(llm, {})
    key = tuple(prompt)
    if key in kept:
        tokens, gaps, asked = kept[key]
        if len(tokens) < asked or len(tokens) >= max_tokens:  # it ended before its limit, or reaches this one
            for i in range(min(len(tokens), max_tokens)):
                if near_tie is not None and i + 1 >= at_least and min(gaps[: i + 1]) < near_tie:
                    return tokens[: i + 1], gaps[: i + 1]
            return tokens[:max_tokens], gaps[:max_tokens]
    tokens, gaps = greedy_with_gaps(llm, prompt, max_tokens, near_tie, at_least)
    ended = bool(tokens) and llama_cpp.llama_vocab_is_eog(llm._model.vocab, tokens[-1])
    if near_tie is None or len(tokens) == max_tokens or ended:
        kept[key] = (tokens, gaps, max_tokens)
    return tokens, gaps


def first_divergence(reference: Sequence[int], other: Sequence[int]) -> int | None:
    """Index of the first position where the two token lists differ (None if one is a prefix)."""
    for i, (a, b) in enumerate(zip(reference, other)):
        if a != b:
            return i
    return None


def first_near_tie(gaps: Sequence[float], threshold: float) -> int:
    """Index of the first position whose top-2 gap is below threshold (len(gaps) if none)."""
    return next((i for i, g in enumerate(gaps) if g < threshold), len(gaps))
