"""plookup.Llama(model_path, vocab_only=True): a tokenizer, as llama_cpp.Llama's (a drop-in use)."""

from __future__ import annotations

import llama_cpp
import pytest

import plookup

TEXT = "Hello, world: tokenizers are <|im_start|>special"


def test_vocab_only_tokenizes_as_llama_cpp_does_and_refuses_to_generate(model_path):
    path = model_path["smollm2"]
    plain = llama_cpp.Llama(path, vocab_only=True, verbose=False)
    llm = plookup.Llama(path, vocab_only=True, verbose=False)  # measured the cost curve: "Memory is not initialized"
    tokens = llm.tokenize(TEXT.encode(), special=True)
    assert tokens == plain.tokenize(TEXT.encode(), special=True)
    assert tokens[:3] == [19556, 28, 905] and 1 in tokens  # "Hello", ",", " world"; <|im_start|> is id 1
    assert llm.detokenize(tokens, special=True) == plain.detokenize(tokens, special=True) == TEXT.encode()
    assert llm.n_vocab() == plain.n_vocab() == 49152
    with pytest.raises(ValueError, match="loaded with vocab_only=True: it tokenizes and detokenizes"):
        llm.create_completion("Hello", max_tokens=3)
