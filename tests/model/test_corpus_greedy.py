"""Corpus drafting on a real model: greedy output with a corpus is plain greedy, and a corpus of another vocabulary is refused."""

from __future__ import annotations

import itertools
import re

import pytest

from plookup.draft.policy import CPU_COST_CURVE
from plookup.index.corpus import CorpusIndex
from support.threads import THREADS


@pytest.fixture(scope="module")
def corpus_case(smol):
    """(prompt, plain greedy output, its top-2 gaps, a corpus holding the answer) for SmolLM2."""
    from plookup.index.memory import vocabulary_id

    from support.plain import chat_prompt_tokens, greedy_with_gaps, standard_workloads

    # A code edit whose plain output's first near-tie is late (token 48, measured): the corpus holds
    # its answer, which the request's own index (the function it edits) holds only in part.
    workload = standard_workloads(0)[1]
    assert workload.name == "code-docstring:textwrap.indent"
    prompt = chat_prompt_tokens(smol, workload.messages)
    reference, gaps = greedy_with_gaps(smol, prompt, 64)
    other = smol.tokenize(b"def unrelated():\n    return 42\n", add_bos=False)
    # What the user wrote before: the end of this question, then the answer.
    corpus = CorpusIndex.from_documents([other, [*prompt[-12:], *reference]], vocabulary_id(smol))
    return prompt, reference, gaps, corpus


def test_greedy_output_with_a_corpus_is_plain_greedy_and_drafts_from_it(model_path, corpus_case, tmp_path):
    import plookup

    from conftest import LLAMA_KWARGS
    from support.plain import NEAR_TIE, first_near_tie

    prompt, reference, gaps, corpus = corpus_case
    path = tmp_path / "answers.idx"
    corpus.save(path)
    # sized by the built-in curve, as `smol` (a clean machine measured SmolLM2's here otherwise)
    llm = plookup.Llama(model_path["smollm2"], corpus=str(path), cost_curve=CPU_COST_CURVE, **LLAMA_KWARGS)
    out = list(itertools.islice(llm.generate(prompt, temp=0.0), len(reference)))
    stats = llm.last_stats
    tie = first_near_tie(gaps, NEAR_TIE["smollm2"])
    print(f"\n{stats.accepted_from_corpus}/{stats.accepted} accepted from the corpus, {len(out)} tokens in "
          f"{stats.forward_passes} passes; first near-tie at {tie} of {len(reference)}")
    assert out[:tie] == reference[:tie]
    assert tie >= 40
    assert stats.accepted_from_corpus > 0 and stats.as_dict()["accepted_from_corpus"] == stats.accepted_from_corpus


def test_a_corpus_of_another_vocabulary_is_refused_naming_the_file(model_path, corpus_case, tmp_path, capsys):
    import plookup
    from plookup.app import cli

    from conftest import LLAMA_KWARGS

    foreign = tmp_path / "foreign.idx"
    CorpusIndex.from_documents([[1, 2, 3, 4]], vocabulary="49152:not-this-model").save(foreign)
    with pytest.raises(ValueError, match=re.escape(str(foreign)) + ": built for another model's vocabulary"):
        plookup.Llama(model_path["smollm2"], corpus=str(foreign), **LLAMA_KWARGS)
    assert cli.main(["generate", "-p", "Hi", "--max-tokens", "4", "--threads", str(THREADS), "--n-ctx", "512",
                     "--corpus", str(foreign)]) == 1
    assert str(foreign) in capsys.readouterr().err
    # The model is usable afterwards, with this model's corpus.
    prompt, reference, _, corpus = corpus_case
    llm = plookup.Llama(model_path["smollm2"], corpus=corpus, cost_curve=CPU_COST_CURVE, **LLAMA_KWARGS)
    assert list(itertools.islice(llm.generate(prompt, temp=0.0), 8)) == reference[:8]
