"""Cached chunks reused by shifting their cells (plookup.engine.reuse, llama-server's --cache-reuse),
on SmolLM2: the prompt tokens evaluated, and the next token's logprobs against a fresh prefill's
(close where a chunk was shifted, since its cells were computed after other tokens; equal where
nothing was)."""

from __future__ import annotations

import inspect

import llama_cpp
import numpy as np
import pytest

import plookup
from plookup.draft.policy import CPU_COST_CURVE

from conftest import LLAMA_KWARGS

# The editor's window over a file: a request after the window's head moved down drops its first
# lines; the rest comes again, further up.
TEXT = inspect.getsource(np)  # numpy/__init__.py: a long real Python file
HEAD = 40  # tokens the window drops


@pytest.fixture(scope="module")
def llm(model_path):
    return plookup.Llama(model_path["smollm2"], cost_curve=CPU_COST_CURVE, **LLAMA_KWARGS)


@pytest.fixture(scope="module")
def plain(model_path):
    return llama_cpp.Llama(model_path["smollm2"], logits_all=True, **LLAMA_KWARGS)


@pytest.fixture(scope="module")
def window(llm) -> list[int]:
    # 400 tokens: each test evaluates its window and the requests after it afresh, the control and
    # the reference again (the module: 38 s at 600 tokens, 27 at 400, on two threads)
    return llm.tokenize(TEXT.encode())[:400]


def next_token(llm, prompt: list[int], cache_reuse=None) -> tuple[dict, dict]:
    """(the next token's top-10 logprobs, the call's stats) after `prompt`, with the call's own
    n_cache_reuse (None: the model's)."""
    with llm.request() as call:
        call.cache_reuse = cache_reuse
        result = llm.create_completion(prompt, max_tokens=1, temperature=0, logprobs=10)
    return result["choices"][0]["logprobs"]["top_logprobs"][0], call.stats.as_dict()


def plains(plain, prompt: list[int]) -> dict:
    plain.reset()
    result = plain.create_completion(prompt, max_tokens=1, temperature=0, logprobs=10)
    return result["choices"][0]["logprobs"]["top_logprobs"][0]


def test_a_moved_window_is_shifted_into_place_and_only_the_new_tokens_are_evaluated(llm, plain, window):
    tail = llm.tokenize(b"\n# a new line typed at the end\n", add_bos=False)
    moved = [*window[:1], *window[1 + HEAD:], *tail]  # BOS, the window without its head, a new line
    next_token(llm, window)  # the slot holds the window
    top, stats = next_token(llm, moved, cache_reuse=16)
    assert stats["shifted_tokens"] == len(window) - 1 - HEAD
    assert stats["prefill_tokens"] == len(tail)
    fresh = plains(plain, moved)
    assert max(top, key=top.get) == max(fresh, key=fresh.get)  # the same next token
    shared = set(top) & set(fresh)
    assert len(shared) >= 7 and max(abs(top[t] - fresh[t]) for t in shared) < 1.0
    # Control: without reuse only the common prefix (the BOS) is kept.
    next_token(llm, window)
    _, stats = next_token(llm, moved, cache_reuse=0)
    assert stats["shifted_tokens"] == 0 and stats["prefill_tokens"] == len(moved) - 1


def close_to_fresh(plain, prompt: list[int], top: dict) -> None:
    fresh = plains(plain, prompt)
    assert max(top, key=top.get) == max(fresh, key=fresh.get)  # the same next token
    shared = set(top) & set(fresh)
    assert len(shared) >= 7 and max(abs(top[t] - fresh[t]) for t in shared) < 1.0


def test_new_tokens_before_a_cached_chunk_are_evaluated_and_the_chunk_still_reused(llm, plain, window):
    """llama.vim's window starting earlier than the cached one's (its speculative request's prefix
    held the suggestion): llama-server's walk evaluates the whole window again; plookup evaluates
    the new tokens, then brings the cached chunk in after them (plookup.engine.reuse)."""
    head = llm.tokenize(b"# two lines the cached window did not have\nimport sys\n", add_bos=False)
    earlier = [*window[:1], *head, *window[1:]]
    next_token(llm, window)
    top, stats = next_token(llm, earlier, cache_reuse=16)
    assert (stats["prefill_tokens"], stats["shifted_tokens"]) == (len(head) + 1, len(window) - 2)
    close_to_fresh(plain, earlier, top)


def test_a_warm_ups_cells_beside_the_ones_kept_from_the_request_before(llm, plain, window):
    """llama.vim's warm-up (the other files' chunks, nothing generated) takes the cells after those
    chunks; the slot keeps the request's cells it gave up, and the next request takes its window
    from them: it evaluates its new tokens only, where llama-server evaluates the whole window."""
    chunks, text = window[:200], window[200:]
    another = llm.tokenize(b"\n# another file's chunk\ndef helper():\n    return 42\n", add_bos=False)
    next_token(llm, [*chunks, *text], cache_reuse=16)
    _, stats = next_token(llm, [*chunks, *another], cache_reuse=16)  # the warm-up
    assert stats["prefill_tokens"] == len(another)
    typed = llm.tokenize(b"\ndef f():\n", add_bos=False)  # (its next token far from a tie)
    request = [*chunks, *another, *text, *typed]
    top, stats = next_token(llm, request, cache_reuse=16)
    assert (stats["prefill_tokens"], stats["shifted_tokens"]) == (len(typed), len(text))
    close_to_fresh(plain, request, top)


def test_where_nothing_is_shifted_reuse_changes_nothing(llm, window):
    """A prompt that goes on from the cached one: the common prefix alone, the same logprobs to the bit."""
    longer = [*window, *llm.tokenize(b"\nimport os\n", add_bos=False)]
    runs = []
    for reuse in (16, 0):
        # the window cached whole, twice: each run's cells alike, its last one decoded alone (a
        # cell decoded in a batch rounds otherwise in this build)
        next_token(llm, window)
        next_token(llm, window)
        runs.append(next_token(llm, longer, cache_reuse=reuse))
    (with_reuse, stats), (without, _) = runs
    assert stats["shifted_tokens"] == 0 and stats["prefill_tokens"] == len(longer) - len(window)
    assert with_reuse == without


def test_the_models_default_and_a_refusal(llm, window):
    llm.cache_reuse = 16
    try:
        next_token(llm, window)
        _, stats = next_token(llm, [*window[:1], *window[1 + HEAD:]])  # the call says nothing: the model's 16
        assert stats["shifted_tokens"] == len(window) - 2 - HEAD  # all but the last token, evaluated for its logits
    finally:
        llm.cache_reuse = 0
    with pytest.raises(ValueError, match="cache_reuse must be an integer >= 0"):
        llm.cache_reuse = -1
