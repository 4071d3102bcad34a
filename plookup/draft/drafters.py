"""Drafters: an index over the tokens seen so far, and a policy that turns its match into a draft.

:class:`SuffixDrafter` (a suffix automaton, with an optional cross-request memory and corpus) and
:class:`NgramDrafter` (an n-gram table) are :class:`plookup.draft.index_drafter.IndexDrafter`s built
from their index and how it is read (its continuation, its runner-up, how it measures a match),
answering the same calls (listed there), so the decoder never knows which one it drives.
:func:`make_drafter` builds one by name.
"""

from __future__ import annotations

from typing import Optional

from ..index.corpus import CorpusIndex
from ..index.memory import GlobalMemory
from ..index.ngram import NgramIndex
from ..index.suffix import SuffixIndex
from .index_drafter import DEFAULT_MAX_DRAFT, IndexDrafter


class SuffixDrafter(IndexDrafter):
    """Drafts from the longest earlier match of the whole current suffix (a suffix automaton:
    :class:`plookup.index.suffix.SuffixIndex`, whose continuation carries each token's agreement
    and whose runner-up at an uncertain token is a draft's second branch).

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
        index = SuffixIndex()
        super().__init__(index, min_match, max_draft, runner_up=index.alternative)
        self.own_memory = memory  # drafted from unless a request brings its own (use_memory)
        self.use_memory(memory)
        self.use_corpus(corpus)

    def use_corpus(self, corpus: Optional[CorpusIndex]) -> None:
        self.corpus = corpus

    def use_memory(self, memory: Optional[GlobalMemory]) -> None:
        """Draft from `memory` (and remember this request there) from the next request on: a
        server's tenant's own (plookup.index.scopes); None: the drafter's own."""
        memory = memory if memory is not None else self.own_memory
        if memory is not self.memory:
            self.memory = memory
            self._cursor = memory.cursor() if memory is not None else None

    def _fresh(self) -> "SuffixDrafter":
        return type(self)(self.policy.min_match, self.own_memory, corpus=self.corpus)  # the memory and the corpus shared


class NgramDrafter(IndexDrafter):
    """Drafts from the most recent earlier occurrence of the longest matching n-gram (n ≤ n_max).

    Without a suffix structure there is no agreement statistic beyond the n-gram's own count, so
    every continuation token is trusted alike (a prediction's too, whose match is measured as an
    n-gram's, n_max tokens at most) and the policy sizes the draft from n alone.
    """

    def __init__(self, n_min: int = 2, n_max: int = 8, max_draft: int = DEFAULT_MAX_DRAFT):
        index = NgramIndex(n_min=n_min, n_max=n_max)
        super().__init__(index, n_min, max_draft, match_cap=n_max, agreement=False)

    def _fresh(self) -> "NgramDrafter":
        return type(self)(self.index.n_min, self.index.n_max)


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
