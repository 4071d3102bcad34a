"""Drafting from a static corpus (plookup.index.corpus) beside the request's own tokens: which source
drafts, the corpus's own calibration, the counters, and on a real model the output and refusals."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

from plookup.draft.drafters import SuffixDrafter, make_drafter
from plookup.draft.policy import CORPUS_PRIOR_HITS, PRIOR_HITS, DraftPolicy
from plookup.draft.values import CORPUS, REQUEST
from plookup.index.corpus import CorpusIndex

DOC = list(range(1000, 1100))  # the corpus's one document
CORPUS_HISTORY = [5, 6, 7, *DOC[:30]]  # ends with 30 tokens of DOC, which the request never repeats
OWN_HISTORY = [*range(2000, 2030), 9, *range(2000, 2025)]  # repeats itself, 25 tokens; not in DOC


def corpus_drafter(**kwargs) -> SuffixDrafter:
    return SuffixDrafter(corpus=CorpusIndex.from_documents([DOC, [1, 2, 3]]), **kwargs)


# -- which source drafts


def test_corpus_continuation_drafts_when_the_request_has_no_match():
    drafter = corpus_drafter()
    drafter.start(CORPUS_HISTORY)
    draft = drafter.propose(8)
    assert draft.source == CORPUS and len(draft) > 0 and draft.match_length == 30
    assert draft.tokens.tolist() == DOC[30 : 30 + len(draft)]
    plain = SuffixDrafter()
    plain.start(CORPUS_HISTORY)
    assert len(plain.propose(8)) == 0  # the request alone has nothing to draft here


def test_the_requests_own_longer_match_wins_over_the_corpus():
    drafter = corpus_drafter()
    # The request copies DOC[:12] twice with other continuations; the corpus matches 12 tokens too
    # but the request's own match (its earlier copy, 13 tokens with the 7 before it) is longer.
    history = [7, *DOC[:12], 50, 51, 52, 53, 7, *DOC[:12]]
    drafter.start(history)
    draft = drafter.propose(8)
    assert draft.source == REQUEST and draft.tokens.tolist()[:2] == [50, 51] and draft.match_length == 13


def test_a_corpus_that_never_matches_drafts_what_no_corpus_drafts():
    drafter, plain = corpus_drafter(), SuffixDrafter()
    for d in (drafter, plain):
        d.start(OWN_HISTORY)
    for token in range(2025, 2030):
        a, b = drafter.propose(8), plain.propose(8)
        assert (a.source, a.match_length, a.tokens.tolist()) == (b.source, b.match_length, b.tokens.tolist())
        drafter.extend([token])
        plain.extend([token])


def test_offer_and_spawn_keep_the_corpus_and_its_calibration():
    drafter = corpus_drafter()
    drafter.start(CORPUS_HISTORY)
    candidate, p = drafter.offer(8)
    assert candidate.source == CORPUS
    expected = drafter.policy.prefix_probabilities(candidate.match_length, candidate.agree, CORPUS)
    assert np.array_equal(p, expected) and not np.array_equal(
        p, drafter.policy.prefix_probabilities(candidate.match_length, candidate.agree))
    twin = drafter.spawn()
    assert twin.corpus is drafter.corpus
    twin.start(CORPUS_HISTORY)
    assert twin.propose(8).source == CORPUS
    with pytest.raises(ValueError, match="suffix drafter"):
        make_drafter("ngram", corpus=drafter.corpus)


# -- the corpus's own calibration


def check_corpus_calibrated_apart(drafter: SuffixDrafter) -> None:
    """Rejected corpus drafts stop the corpus drafting; the request's own drafts (same bucket) go on."""
    drafter.start(CORPUS_HISTORY)
    first = drafter.propose(8)
    assert first.source == CORPUS and len(first) > 0
    for _ in range(12):
        draft = drafter.propose(8)
        if not len(draft):
            break
        drafter.observe(draft, 0)
    assert len(drafter.propose(8)) == 0, "rejected corpus drafts should stop the corpus drafting"
    drafter.sync(OWN_HISTORY)  # same request, calibration kept; the request now repeats itself
    own = drafter.propose(8)
    assert own.source == REQUEST and len(own) > 0, "the request's own drafts should go on"
    drafter.start(CORPUS_HISTORY)  # a new request calibrates afresh: the corpus drafts again
    assert len(drafter.propose(8)) == len(first)


def test_rejected_corpus_drafts_stop_the_corpus_not_the_request():
    check_corpus_calibrated_apart(corpus_drafter())


def test_control_a_shared_calibration_fails_the_check(monkeypatch):
    def shared(self, source):
        return PRIOR_HITS, self._hits, self._trials  # every source in the request's calibration

    monkeypatch.setattr(DraftPolicy, "_outcomes", shared)
    with pytest.raises(AssertionError, match="request's own drafts"):
        check_corpus_calibrated_apart(corpus_drafter())


def test_corpus_prior_is_more_pessimistic_and_observe_updates_only_its_source():
    assert np.all(CORPUS_PRIOR_HITS < PRIOR_HITS)
    policy = DraftPolicy()
    before = policy.reliability(20)
    policy.observe(20, 4, 0, source=CORPUS)
    assert policy.reliability(20) == before and policy.reliability(20, CORPUS) < policy.reliability(20)
    policy.observe(20, 4, 4)  # the request's (and the memory's) calibration
    assert policy.reliability(20, "memory") == policy.reliability(20) > before
    policy.start_request()
    assert policy.reliability(20) == before
    assert policy.reliability(20, CORPUS) == pytest.approx(CORPUS_PRIOR_HITS[4] / 4.0)


# -- a real model


@pytest.fixture(scope="module")
def corpus_case(smol):
    """(prompt, plain greedy output, its top-2 gaps, a corpus holding the answer) for SmolLM2."""
    from plookup.app.bench.plain import chat_prompt_tokens, greedy_with_gaps
    from plookup.app.bench.workloads import standard_workloads
    from plookup.index.memory import vocabulary_id

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
    from plookup.app.bench.plain import NEAR_TIE, first_near_tie

    from conftest import LLAMA_KWARGS

    prompt, reference, gaps, corpus = corpus_case
    path = tmp_path / "answers.idx"
    corpus.save(path)
    llm = plookup.Llama(model_path["smollm2"], corpus=str(path), **LLAMA_KWARGS)
    out = list(itertools.islice(llm.generate(prompt, temp=0.0), len(reference)))
    stats = llm.last_stats
    tie = first_near_tie(gaps, NEAR_TIE["smollm2"])
    print(f"\n{stats.accepted_from_corpus}/{stats.accepted} accepted from the corpus, {len(out)} tokens in "
          f"{stats.forward_passes} passes; first near-tie at {tie} of {len(reference)}")  # fmt: skip
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
    assert cli.main(["generate", "-p", "Hi", "--max-tokens", "4", "--threads", "2", "--n-ctx", "512",
                     "--corpus", str(foreign)]) == 1  # fmt: skip
    assert str(foreign) in capsys.readouterr().err
    # The model is usable afterwards, with this model's corpus.
    prompt, reference, _, corpus = corpus_case
    llm = plookup.Llama(model_path["smollm2"], corpus=corpus, **LLAMA_KWARGS)
    assert list(itertools.islice(llm.generate(prompt, temp=0.0), 8)) == reference[:8]
