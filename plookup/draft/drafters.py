"""Drafters: an index over the tokens seen so far, and a policy that turns its match into a draft.

:class:`SuffixDrafter` (a suffix automaton, with an optional cross-request memory and corpus) and
:class:`NgramDrafter` (an n-gram table) answer the same calls, those of
:class:`plookup.draft.index_drafter.IndexDrafter` (listed there), so the decoder never knows which
one it drives. :func:`make_drafter` builds one by name.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..index.corpus import DEFAULT_MAX_MATCH, CorpusIndex
from ..index.memory import GlobalMemory
from ..index.ngram import NgramIndex
from ..index.suffix import SuffixIndex
from .index_drafter import DEFAULT_MAX_DRAFT, IndexDrafter
from .values import CORPUS, EMPTY, MEMORY, REQUEST, Candidate


class SuffixDrafter(IndexDrafter):
    """Drafts from the longest earlier match of the whole current suffix (a suffix automaton).

    With a ``memory`` (:class:`plookup.index.memory.GlobalMemory`, may be shared by several drafters),
    the request's suffix is also matched against earlier requests, and the longest of the matches
    drafts (ties: the request's own, then its prediction's). ``finish()`` adds the history to the
    memory.

    With a ``corpus`` (:class:`plookup.index.corpus.CorpusIndex`, read only, may be shared), the last
    ``corpus_match`` tokens of the history are also looked up in it, one lookup per proposal; its
    continuation drafts when the policy expects more tokens per verify cost from it than from the
    request's (or its prediction's, or the memory's) candidate, each weighed by its own source's
    calibration.
    """

    def __init__(self, min_match: int = 2, memory: GlobalMemory | None = None, max_draft: int = DEFAULT_MAX_DRAFT,
                 corpus: CorpusIndex | None = None):
        super().__init__(SuffixIndex(), min_match, max_draft)
        self.memory = memory
        self.own_memory = memory  # drafted from unless a request brings its own (use_memory)
        self._cursor = memory.cursor() if memory is not None else None
        self.corpus: CorpusIndex | None = corpus
        # The most history tokens a corpus lookup matches, the request's own bound: longer matches
        # say little more (the policy's buckets are doubling lengths) and a lookup's cost grows with them.
        self.corpus_match = DEFAULT_MAX_MATCH

    def use_corpus(self, corpus: Optional[CorpusIndex]) -> None:
        self.corpus = corpus

    def use_memory(self, memory: Optional[GlobalMemory]) -> None:
        """Draft from `memory` (and remember this request there) from the next request on: a
        server's tenant's own (plookup.index.scopes); None: the drafter's own."""
        memory = memory if memory is not None else self.own_memory
        if memory is not self.memory:
            self.memory = memory
            self._cursor = memory.cursor() if memory is not None else None

    def reset(self) -> None:
        super().reset()
        if self._cursor is not None:
            self._cursor.start()

    def _fresh(self) -> "SuffixDrafter":
        drafter = type(self)(self.policy.min_match, self.own_memory)  # the memory and the corpus are shared
        drafter.use_corpus(self.corpus)
        return drafter

    def warm_up(self) -> None:
        super().warm_up()
        if self.corpus is not None:
            self.corpus.warm_up()

    def finish(self) -> None:
        super().finish()
        if self.memory is not None:
            self.memory.add(self.index.tokens)

    def _sources(self):
        sources = super()._sources()  # the request's prediction, whose ties go before the memory's
        return sources if self._cursor is None else [*sources, (MEMORY, self._cursor)]

    def _alternative(self, candidate: Candidate, branch_point: int, max_len: int):
        if candidate.source != REQUEST:
            return EMPTY, EMPTY  # a cursor (the prediction's, the memory's) drafts a single branch
        return self.index.alternative(branch_point, max_len)

    def _candidate(self, max_draft: int) -> Candidate:
        """The best of the request's own match, its prediction's, the memory's and the corpus's."""
        own = self._own_candidate(max_draft)
        if self.corpus is None:
            return own
        found = self.corpus.lookup(self.index.tokens[-self.corpus_match :], max_draft, self.corpus_match)
        if found.length < self.policy.min_match or found.tokens.size == 0:
            return own
        corpus = Candidate(found.tokens, found.agree, found.length, CORPUS)
        if own.match_length == 0:
            return corpus
        value = self.policy.value  # each by its own calibration; ties: the request's (or another source's)
        if value(corpus.match_length, corpus.agree, CORPUS) > value(own.match_length, own.agree, own.source):
            return corpus
        return own

    def _continuation(self, length: int, max_draft: int) -> Candidate:
        tokens, agree = self.index.continuation(max_draft)
        return Candidate(tokens, agree, length, REQUEST)


class NgramDrafter(IndexDrafter):
    """Drafts from the most recent earlier occurrence of the longest matching n-gram (n ≤ n_max).

    Without a suffix structure there is no agreement statistic beyond the n-gram's own count, so
    every continuation token is trusted alike and the policy sizes the draft from n alone.
    """

    def __init__(self, n_min: int = 2, n_max: int = 8, max_draft: int = DEFAULT_MAX_DRAFT):
        super().__init__(NgramIndex(n_min=n_min, n_max=n_max), n_min, max_draft)

    def _fresh(self) -> "NgramDrafter":
        return type(self)(self.index.n_min, self.index.n_max)

    def _continuation(self, length: int, max_draft: int) -> Candidate:
        _, end, _ = self.index.match()
        tokens = self.index.tokens[end + 1 : end + 1 + max_draft]
        return Candidate(tokens, np.ones(len(tokens)), length, REQUEST)

    def _measured(self, length: int) -> int:
        return min(length, self.index.n_max)  # an n-gram match is n_max tokens at most

    def _agreement(self, agree: np.ndarray) -> np.ndarray:
        return np.ones(len(agree))  # every continuation token trusted alike, as the n-gram's own


DRAFTERS = {"suffix": SuffixDrafter, "ngram": NgramDrafter}


def make_drafter(
    name: str = "suffix", max_draft: int = DEFAULT_MAX_DRAFT, memory: Optional[GlobalMemory] = None,
    cost_curve=None, corpus: Optional[CorpusIndex] = None,
) -> IndexDrafter:
    """The drafter `name` ("suffix" or "ngram") with its defaults: the one way plookup.Llama, the
    command line, the benchmark and the server build one. ``memory``, ``corpus``: suffix drafter only."""
    if name not in DRAFTERS:
        raise ValueError(f"unknown drafter {name!r}; known: {', '.join(DRAFTERS)}")
    if memory is not None and name != "suffix":
        raise ValueError("only the suffix drafter drafts from a cross-request memory")
    if name == "suffix":
        drafter: IndexDrafter = SuffixDrafter(memory=memory, max_draft=max_draft, corpus=corpus)
    else:
        drafter = NgramDrafter(max_draft=max_draft)
        drafter.use_corpus(corpus)  # refuses one
    if cost_curve is not None:
        drafter.use_cost_curve(cost_curve)
    return drafter


def compile_kernels() -> None:
    """Every drafter's numba kernels compiled into numba's cache (``make install`` calls it), the
    memory's too: a model's first start then only loads them."""
    for name in DRAFTERS:
        make_drafter(name, memory=GlobalMemory(8) if name == "suffix" else None).warm_up()
