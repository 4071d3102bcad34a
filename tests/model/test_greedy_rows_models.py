"""The argmax rows on real models: the chain's tokens."""

from __future__ import annotations

import pytest

from plookup.verify.greedy import GreedyRows

from support.plain import chat_prompt_tokens

MESSAGES = [{"role": "user", "content": "Repeat this list three times: apple, pear, plum, fig."}]


def generate(llm, prompt, repeat_penalty: float, n: int = 48) -> list[int]:
    tokens = []
    for token in llm.generate(prompt, temp=0.0, repeat_penalty=repeat_penalty):
        tokens.append(token)
        if len(tokens) >= n:
            break
    return tokens


@pytest.mark.parametrize("repeat_penalty", [1.0, 1.5])
def test_models_give_the_chains_tokens(any_model_pair, monkeypatch, repeat_penalty):
    """The same model, drafts and batches; rows read as an argmax or by llama.cpp's chain."""
    name, _, llm = any_model_pair
    prompt = chat_prompt_tokens(llm, MESSAGES)
    fast = generate(llm, prompt, repeat_penalty)
    assert llm.last_stats.sampler == "argmax"
    monkeypatch.setattr("plookup.api.sampling.greedy_rows", lambda *a, **k: None)
    chain = generate(llm, prompt, repeat_penalty)
    assert llm.last_stats.sampler == "chain"
    assert fast == chain, name
    if repeat_penalty != 1.0:  # control: the same rows without the penalty are another answer
        monkeypatch.setattr("plookup.api.sampling.greedy_rows", lambda n_vocab, last_n, **k: GreedyRows(n_vocab))
        assert generate(llm, prompt, repeat_penalty) != chain, name
