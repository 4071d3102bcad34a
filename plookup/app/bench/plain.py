"""Plain decoding as the yardstick: greedy tokens with the top-2 logit gap at every position.

llama.cpp's batched kernels round differently from single-token decoding, so where plain greedy
decoding's two best logits are within a few tenths, a speculative run may legitimately pick the
other one. These helpers find the first divergence and the gap there, so a difference can be told
apart from a bug.
"""

from __future__ import annotations

from typing import Sequence

import llama_cpp
import numpy as np
from llama_cpp import llama_chat_format
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from ...api.context import is_eog, logits_stale

# Per model (the names of plookup.app.models): below this top-2 logit gap of plain greedy decoding, a
# verify batch may pick the other token, because llama.cpp's batched kernels round differently from
# single-token decoding. Each is about the largest change of that gap measured between single-token
# decoding and verify batches (docs/lab/notebook.md, "Figures behind the code's choices").
NEAR_TIE = {"smollm2": 0.3, "gemma3": 0.6, "qwen-coder-0.5b": 0.4}


def chat_prompt_tokens(llm: llama_cpp.Llama, messages: list[dict]) -> list[int]:
    """Tokens of `messages` as create_chat_completion would prompt the model.

    The GGUF's own template when it has one, else llama_cpp's built-in format named by
    ``llm.chat_format`` (Gemma 3 270M's GGUF has no template: load it with chat_format="gemma").
    """
    template = llm.metadata.get("tokenizer.chat_template")
    if template is None:
        formatter = getattr(llama_chat_format, "format_" + llm.chat_format.replace("-", ""))
        result = formatter(messages=messages)
        return llm.tokenize(result.prompt.encode("utf-8"), special=True)

    def piece(token: int) -> str:
        return llm.detokenize([token], special=True).decode("utf-8", "replace") if token >= 0 else ""

    result = Jinja2ChatFormatter(
        template=template,
        eos_token=piece(llm.token_eos()),
        bos_token=piece(llm.token_bos()),
        add_generation_prompt=True,
    )(messages=messages)
    return llm.tokenize(result.prompt.encode("utf-8"), add_bos=not result.added_special, special=True)


def greedy_with_gaps(
    llm: llama_cpp.Llama, prompt: Sequence[int], max_tokens: int, near_tie: float | None = None, at_least: int = 0
) -> tuple[list[int], list[float]]:
    """Plain greedy decoding, one token per llama_decode, stopping at end-of-generation, and with
    `near_tie` also after the first token chosen by a gap below it once `at_least` are out (a
    comparison that ends at the first near-tie needs no more).

    Returns the tokens and, for each, the gap between the best and second-best logit it was
    chosen from.
    """
    llm.reset()
    llm.eval(list(prompt))
    tokens: list[int] = []
    gaps: list[float] = []
    for _ in range(max_tokens):
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(llm.n_vocab(),))
        token = int(np.argmax(logits))
        second, first = np.partition(logits, -2)[-2:]
        tokens.append(token)
        gaps.append(float(first - second))
        if is_eog(llm, token) or llm.n_tokens >= llm.n_ctx():
            break
        if near_tie is not None and len(tokens) >= at_least and min(gaps) < near_tie:
            break
        llm.eval([token])
    logits_stale(llm)
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
