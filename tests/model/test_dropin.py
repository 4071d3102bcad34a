"""The zero-change path: llama_cpp.Llama(draft_model=plookup.SuffixDrafter())."""

from __future__ import annotations

import llama_cpp
import pytest

import plookup

from conftest import LLAMA_KWARGS

# No near-tie in plain greedy decoding of its first 60 tokens on SmolLM2 (see test_decoder.py).
COPY_PROMPT = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,"
# draft_model makes llama_cpp keep logits for every position (n_ctx x n_vocab floats): keep n_ctx small.
KWARGS = dict(LLAMA_KWARGS, n_ctx=256)


@pytest.fixture(scope="module")
def plain(model_path):
    return llama_cpp.Llama(model_path["smollm2"], **KWARGS)


def test_suffix_drafter_as_draft_model_keeps_the_output(model_path, plain):
    drafter = plookup.SuffixDrafter()
    dropin = llama_cpp.Llama(model_path["smollm2"], draft_model=drafter, **KWARGS)
    assert dropin._logits_all  # the cost of this path: logits at every position, prompt included
    expected = plain.create_completion(COPY_PROMPT, max_tokens=60, temperature=0.0)
    got = dropin.create_completion(COPY_PROMPT, max_tokens=60, temperature=0.0)
    assert got["choices"][0]["text"] == expected["choices"][0]["text"]
    # The drafter was consulted at the last step: its index holds everything but the last token.
    prompt = dropin.tokenize(COPY_PROMPT.encode())
    assert len(drafter.index) == len(prompt) + got["usage"]["completion_tokens"] - 1
    assert drafter.index.tokens.tolist() == dropin.input_ids[: len(drafter.index)].tolist()
