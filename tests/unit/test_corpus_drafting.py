"""Drafting from a static corpus (plookup.index.corpus) beside the request's own tokens: which source
drafts, the corpus's own calibration, the counters (on a real model, the output and refusals:
tests/model/test_corpus_greedy.py)."""

from __future__ import annotations

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
    drafter.start(CORPUS_HISTORY)  # a new request: its prior leans on the past, where the corpus went astray
    assert len(drafter.propose(8)) < len(first)
    drafter.policy.past.clear()
    drafter.start(CORPUS_HISTORY)  # with no past it calibrates afresh: the corpus drafts again
    assert len(drafter.propose(8)) == len(first)


def test_rejected_corpus_drafts_stop_the_corpus_not_the_request():
    check_corpus_calibrated_apart(corpus_drafter())


def test_control_a_shared_calibration_fails_the_check(monkeypatch):
    def shared(self, source):
        return PRIOR_HITS, self._hits, self._trials  # every source in the request's calibration

    monkeypatch.setattr(DraftPolicy, "_outcomes", shared)
    monkeypatch.setattr(DraftPolicy, "_own", lambda self, kind: (self._hits, self._trials))
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
    policy.start_request()  # its own counts gone; its prior comes down where the past's outcomes were worse
    assert policy.reliability(20) == before and policy.reliability(20, CORPUS) < CORPUS_PRIOR_HITS[4] / 4.0
    policy.past.clear()
    assert policy.reliability(20) == before
    assert policy.reliability(20, CORPUS) == pytest.approx(CORPUS_PRIOR_HITS[4] / 4.0)


# -- a real model
