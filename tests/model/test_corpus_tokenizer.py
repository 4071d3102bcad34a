"""A corpus built with a real model's tokenizer, and refused by a model of another vocabulary."""

from __future__ import annotations

import pytest

from plookup.index.corpus import CorpusIndex
from plookup.index.corpus_build import build_corpus

from support.trees import tree  # noqa: F401 (a fixture)


def test_build_with_a_real_tokenizer_and_refuse_another_vocabulary(tree, tmp_path, model_path):
    index, _ = build_corpus([tree / "pkg"], model_path["smollm2"])
    path = tmp_path / "smol.plc"
    index.save(path)
    import llama_cpp

    from plookup.index.memory import vocabulary_id

    smol = llama_cpp.Llama(model_path["smollm2"], vocab_only=True, verbose=False)
    tokens = smol.tokenize(b"def add(a, b):\n    return", add_bos=False, special=False)
    loaded = CorpusIndex.load(path, vocabulary=vocabulary_id(smol))
    match = loaded.lookup(tokens, 8)
    assert match.length == len(tokens)
    assert smol.detokenize(match.tokens.tolist()).startswith(b" a + b")
    gemma = llama_cpp.Llama(model_path["gemma3"], vocab_only=True, verbose=False)
    with pytest.raises(ValueError, match="another model's vocabulary"):
        CorpusIndex.load(path, vocabulary=vocabulary_id(gemma))
    assert gemma.tokenize(b"still usable", add_bos=False, special=False)
