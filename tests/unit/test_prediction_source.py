"""A Predicted Output is a draft source of its own beside the request's history (plookup.index.memory's
prediction_cursor, consulted through IndexDrafter by both drafters): the longer match drafts, ties
go to the request's own; its drafts are labelled PREDICTION and calibrated as the request's own
(that a verdict counts them as neither memory nor corpus acceptances is test_engine_parts.py's);
and where the prediction and the history do not
interact (a prediction whose text the answer copies), it drafts what the former design did, the
prediction indexed ahead of the prompt."""

from __future__ import annotations

import numpy as np
import pytest

from plookup.draft.drafters import NgramDrafter, SuffixDrafter
from plookup.draft.values import CORPUS, PREDICTION, REQUEST, Draft
from plookup.index.memory import GlobalMemory

KINDS = ["suffix", "ngram"]
RNG = np.random.default_rng(39)
PREDICTION_TEXT = RNG.permutation(np.arange(100, 160)).tolist()  # no token twice: one occurrence each
PROMPT = RNG.permutation(np.arange(200, 230)).tolist()  # nothing in common with the prediction


def drafter_of(kind: str):
    return SuffixDrafter() if kind == "suffix" else NgramDrafter()


@pytest.mark.parametrize("kind", KINDS)
def test_a_history_whose_end_is_in_the_prediction_drafts_its_continuation(kind):
    drafter = drafter_of(kind)
    drafter.start([*PROMPT, *PREDICTION_TEXT[10:13]], prediction=PREDICTION_TEXT)
    candidate = drafter.candidate(8)
    assert candidate.source == PREDICTION and candidate.match_length == 3
    assert candidate.tokens.tolist() == PREDICTION_TEXT[13:21] and candidate.agree.tolist() == [1.0] * 8
    draft = drafter.propose(8)
    assert draft.source == PREDICTION and draft.tokens.tolist() == PREDICTION_TEXT[13 : 13 + len(draft)]
    # the same history without it: nothing repeats
    drafter.start([*PROMPT, *PREDICTION_TEXT[10:13]])
    assert drafter.candidate(8).match_length == 0 and len(drafter.propose(8)) == 0


def test_an_ngram_drafter_measures_a_predictions_match_as_its_own_n_grams():
    drafter = NgramDrafter(n_min=2, n_max=4)
    drafter.start([*PROMPT, *PREDICTION_TEXT[:9]], prediction=PREDICTION_TEXT)
    candidate = drafter.candidate(5)
    assert (candidate.source, candidate.match_length, candidate.tokens.tolist()) == (PREDICTION, 4, PREDICTION_TEXT[9:14])


@pytest.mark.parametrize("kind", KINDS)
def test_the_longer_match_drafts_and_a_tie_goes_to_the_requests_own(kind):
    a, b, c = PREDICTION_TEXT[20:23]
    own = [a, b, 7, 8]  # "a b" went on with 7 8 in the request itself ...
    drafter = drafter_of(kind)
    drafter.start([*PROMPT, *own, a, b], prediction=PREDICTION_TEXT)  # ... and with c in the prediction
    candidate = drafter.candidate(2)
    assert (candidate.source, candidate.match_length, candidate.tokens.tolist()) == (REQUEST, 2, [7, 8])
    z = PREDICTION_TEXT[19]
    drafter.start([*PROMPT, *own, z, a, b], prediction=PREDICTION_TEXT)  # "z a b": the prediction's is longer
    candidate = drafter.candidate(2)
    assert (candidate.source, candidate.match_length, candidate.tokens.tolist()) == (PREDICTION, 3, [c, PREDICTION_TEXT[23]])


def test_a_prediction_ties_before_the_memory():
    memory = GlobalMemory(1024)
    memory.add([*PREDICTION_TEXT[:30], 1, 2, 3])  # an earlier request went on otherwise after the same text
    drafter = SuffixDrafter(memory=memory)
    drafter.start([*PROMPT, *PREDICTION_TEXT[25:30]], prediction=PREDICTION_TEXT)
    assert drafter.candidate(3).source == PREDICTION and drafter.candidate(3).tokens.tolist() == PREDICTION_TEXT[30:33]
    drafter.start([*PROMPT, *PREDICTION_TEXT[25:30]])
    assert drafter.candidate(3).source == "memory" and drafter.candidate(3).tokens.tolist() == [1, 2, 3]


@pytest.mark.parametrize("kind", KINDS)
def test_a_prediction_serves_its_own_generation_only(kind):
    drafter = drafter_of(kind)
    drafter.start([*PROMPT, *PREDICTION_TEXT[:4]], prediction=PREDICTION_TEXT)
    assert drafter.candidate(4).source == PREDICTION
    drafter.finish()
    assert drafter.candidate(4).match_length == 0  # finished: gone
    buffer = np.zeros(128, dtype=np.int32)
    prompt = [*PROMPT, *PREDICTION_TEXT[:4]]
    drafter.bind(buffer, prompt, PREDICTION_TEXT)  # the engine's way in
    buffer[: len(prompt)] = prompt
    drafter.cover(len(prompt))
    assert drafter.candidate(4).source == PREDICTION
    drafter.bind(buffer, prompt)  # the next request brings none
    drafter.cover(len(prompt))
    assert drafter.candidate(4).match_length == 0


def calibrations(drafter) -> tuple[np.ndarray, np.ndarray]:
    """The request's calibration and the corpus's, (hits, trials) each, stacked."""
    return np.stack(drafter.policy.calibration(REQUEST)), np.stack(drafter.policy.calibration(CORPUS))


def test_a_predictions_drafts_are_calibrated_as_the_requests_own():
    """Five verdicts on drafts from the prediction move the request's calibration exactly as five on
    the request's own drafts do, and leave the corpus's as a fresh drafter's: a prediction's outcomes
    recorded nowhere, or as the corpus's, fail it."""
    fresh = SuffixDrafter()
    fresh.start(PROMPT)
    before_own, before_corpus = calibrations(fresh)
    drafted = {}
    for source in (REQUEST, PREDICTION):
        drafter = SuffixDrafter()
        drafter.start(PROMPT)
        for _ in range(5):
            drafter.observe(Draft(np.arange(6, dtype=np.int32), 4, source), 2)
        drafted[source] = calibrations(drafter)
    own, corpus = drafted[PREDICTION]
    assert own[1].sum() > before_own[1].sum() and not np.array_equal(own, before_own)  # learned from them
    np.testing.assert_array_equal(corpus, before_corpus)  # ... as the request's, not the corpus's
    np.testing.assert_array_equal(own, drafted[REQUEST][0])


@pytest.mark.parametrize("kind", KINDS)
def test_where_the_answer_copies_the_prediction_the_drafts_are_the_prepended_designs(kind):
    """The former design indexed [*prediction, *prompt] as the history. Where the answer copies
    the prediction (and neither the prompt nor the answer repeats itself), each proposal is the
    same: the same match, its one occurrence in the prediction, the same continuation and size."""
    new, former = drafter_of(kind), drafter_of(kind)
    new.start(PROMPT, prediction=PREDICTION_TEXT)
    former.start([*PREDICTION_TEXT, *PROMPT])
    answer = PREDICTION_TEXT[5:40]  # stops well before the prediction's end (the former drafted on into the prompt)
    proposals = 0
    for i, token in enumerate(answer):
        a, b = new.propose(8), former.propose(8)
        assert (a.tokens.tolist(), a.match_length) == (b.tokens.tolist(), b.match_length), i
        assert a.source == (PREDICTION if len(a) else None) and b.source == (REQUEST if len(b) else None)
        proposals += len(a) > 0
        accepted = len(a)  # the answer is the prediction: every draft token accepted
        new.observe(a, accepted)
        former.observe(b, accepted)
        new.extend([token])
        former.extend([token])
    assert proposals > 20
