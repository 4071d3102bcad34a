"""The argmax rows on real models: the chain's tokens."""

from __future__ import annotations

import pytest

from plookup.verify.greedy import GreedyRows

from support.plain import chat_prompt_tokens

MESSAGES = [{"role": "user", "content": "Repeat this list three times: apple, pear, plum, fig."}]


def generate(llm, prompt, repeat_penalty: float, n: int = 48) -> list[int]:
    # The same batches every time, so that only how rows are read differs: the whole prompt in one
    # llama_decode (left to the cache, a later call re-evaluates the last prompt token alone), and
    # the same drafts (the policy's prior leans on the model's earlier requests' outcomes: the
    # same call drafted 15, 12 and 8 tokens in three repeats). In the default build other batches
    # round otherwise and a near-tie turns (smollm2, whose answer here meets one at its first token).
    llm.reset()
    llm.drafter.policy.past.clear()
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
