"""The drafter, :class:`IndexDrafter`, and the calls it answers, which the decoder, the API and
the commands drive it through (a module of its own: they need no kind's own code): a generation's
history in (``start``, or the engine's ``bind`` and ``cover`` over a slot's buffer; ``sync``,
``extend``), its drafts out (``propose``; ``offer`` where several slots' drafts are sized
together), the verdicts back (``observe``, ``observe_sampling``), its end (``finish``); and
``use_cost_curve``, ``use_corpus``, ``spawn``, ``warm_up``. The kinds of :mod:`plookup.draft.drafters`
(a suffix automaton, an n-gram table) are its constructors, each giving it an index and how that
index is read.

Each is also a ``llama_cpp.llama_speculative.LlamaDraftModel`` (``drafter(input_ids) -> tokens``) for
``llama_cpp.Llama(draft_model=...)``, keeping its index incremental across those calls.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Optional

import numpy as np
import numpy.typing as npt
from llama_cpp.llama_speculative import LlamaDraftModel

from ..index.corpus import DEFAULT_MAX_MATCH, CorpusIndex
from ..index.memory import GlobalMemory, MemoryCursor, prediction_cursor
from ..index.ngram import NgramIndex
from ..index.suffix import SuffixIndex
from .policy import DraftPolicy
from .values import CORPUS, EMPTY, MEMORY, NO_CANDIDATE, NO_DRAFT, PREDICTION, REQUEST, Branch, Candidate, Draft

# The most draft tokens verified per step, unless told otherwise: a bound, not a length. The policy
# sizes each draft from the measured cost curve (measured up to this bound, plookup.measure.costs),
# so drafts grow this long only where the curve and the acceptance pay for it: long copies
# (whole files, predictions) where a verify step's cost grows slower than its rows, as on a CPU
# for small models and on memory-bound hardware (BENCHMARKS.md, "Drafts as long as they pay").
DEFAULT_MAX_DRAFT = 64
# The LlamaDraftModel adapter has no verdict channel and pays llama-cpp-python's logits_all verify
# cost, so it drafts a fixed length like llama_cpp's own prompt-lookup drafter.
ADAPTER_MAX_DRAFT = 10


def check_max_draft(max_draft) -> int:
    if isinstance(max_draft, bool) or not isinstance(max_draft, (int, np.integer)) or max_draft < 0:
        raise ValueError(f"max_draft must be an integer >= 0, got {max_draft!r}")
    return int(max_draft)


class IndexDrafter(LlamaDraftModel):
    """An index over the history (its own array, or a slot's buffer it is bound to: the one copy
    of the history), the sources matched beside it (the request's prediction; a memory of earlier
    requests and a corpus where given), and the policy that sizes their best candidate into a
    draft. Built from its index (whose ``continuation(max_draft)`` is the (tokens, agree) that
    followed its match) and how that is read, plain values: ``runner_up(at, max_len)``, the
    runner-up to that continuation at its token `at`, a draft's second branch (None: none); ``match_cap``,
    the longest match the index measures, other sources' capped so too (None: no cap);
    ``agreement``, False where the index keeps no agreement statistic: the other sources' tokens
    are then trusted alike, as the index trusts its own."""

    index: SuffixIndex | NgramIndex

    def __init__(self, index, min_match: int, max_draft: int, *,
                 runner_up: Optional[Callable[[int, int], tuple[np.ndarray, np.ndarray]]] = None,
                 match_cap: Optional[int] = None, agreement: bool = True):
        self.index = index
        self.runner_up = runner_up
        self.match_cap, self.agreement = match_cap, agreement
        self.policy = DraftPolicy(min_match=min_match)
        self.max_draft = check_max_draft(max_draft)
        # Whether a draft may carry a second branch: plookup.Llama turns it off where two-branch
        # batches are not bitwise exact but single ones are (see plookup.measure.exactness).
        self.branches = True
        self._prediction: Optional[MemoryCursor] = None  # this generation's prediction, as a draft source
        # Earlier requests (a cursor streaming the history against them), the user's files: a
        # suffix drafter's, where given (SuffixDrafter.use_memory, use_corpus).
        self.memory: Optional[GlobalMemory] = None
        self._cursor: Optional[MemoryCursor] = None
        self.corpus: Optional[CorpusIndex] = None
        # The most history tokens a corpus lookup matches, the request's own bound: longer matches
        # say little more (the policy's buckets are doubling lengths) and a lookup's cost grows with them.
        self.corpus_match = DEFAULT_MAX_MATCH

    def use_cost_curve(self, cost) -> None:
        """Size drafts for this verify-cost curve (see :mod:`plookup.measure.costs`)."""
        self.policy = DraftPolicy(self.policy.min_match, cost, self.policy.past)

    def use_corpus(self, corpus: Optional[CorpusIndex]) -> None:
        """Draft also from `corpus` (None: no more)."""
        if corpus is not None:
            raise ValueError("only the suffix drafter drafts from a corpus")

    # -- the history: a generation's start, its tokens in, its end

    def start(self, tokens: npt.ArrayLike, prediction: npt.ArrayLike = ()) -> None:
        """A new generation over `tokens`: sync the index, calibrate afresh, draft also from
        `prediction`."""
        self.sync(tokens)
        self._begin(prediction)

    def bind(self, buffer: np.ndarray, prompt, prediction: npt.ArrayLike = ()) -> None:
        """A new generation whose history is written in `buffer`, a slot's token buffer that the
        index reads from now on, called before the prompt is written there (then :meth:`cover`
        indexes it): the history indexed there is kept where `prompt` begins with it, and
        forgotten where it does not, or where `buffer` is not the array indexed (another slot's,
        llama_cpp's ``input_ids`` replaced by ``load_state``). That the buffer still holds what
        was indexed is the caller's to know (the index can only compare the buffer with itself):
        where something else wrote there since, the caller calls :meth:`reset` first."""
        if not self.index.bound_to(buffer):
            self.index.bind(buffer)
            self.reset()
        elif not self._extends(prompt):
            self.reset()
        self._begin(prediction)

    def cover(self, n: int) -> None:
        """Index the bound buffer's tokens up to its first `n` (the prompt, then the tokens each
        verdict writes there)."""
        self.index.cover(n)

    def _begin(self, prediction: npt.ArrayLike) -> None:
        self._prediction = prediction_cursor(prediction)
        self.policy.start_request()

    def _extends(self, tokens) -> bool:
        """Whether the indexed history is a prefix of `tokens`."""
        n = len(self.index)
        return n <= len(tokens) and np.array_equal(self.index.tokens, np.asarray(tokens[:n], dtype=np.int32))

    def sync(self, tokens: npt.ArrayLike) -> None:
        """Make the index hold exactly `tokens` in an array of its own (appends only the new suffix
        where the indexed history is a prefix of them, rebuilds otherwise)."""
        tokens = np.asarray(tokens, dtype=np.int32)
        if self.index.borrowed:  # used alone again: a history of its own
            self.index.release()
            self.reset()
        if not self._extends(tokens):
            self.reset()
        self.extend(tokens[len(self.index) :])

    def reset(self) -> None:
        """Forget the history (and what was fed of it to the prediction's and the memory's cursors)."""
        self.index.reset()
        for _, cursor in self._sources():
            cursor.start()

    def extend(self, tokens: npt.ArrayLike) -> None:
        """Append verified tokens."""
        self.index.extend(tokens)

    def finish(self) -> None:
        """The generation over the indexed history is done: its prediction with it; a memory
        remembers it."""
        self._prediction = None
        if self.memory is not None:
            self.memory.add(self.index.tokens)

    def warm_up(self) -> None:
        """Compile or load every kernel a generation calls, leaving the index empty."""
        self.sync(np.array([1, 2, 4, 1, 2, 5, 1, 2], dtype=np.int32))  # "1 2" is followed by 4 or 5
        candidate = self.candidate(4)
        candidate = replace(candidate, match_length=max(candidate.match_length, self.policy.min_match))
        self.policy.choose(candidate.match_length, candidate.agree)
        self.policy.value(candidate.match_length, candidate.agree)
        self._branch(candidate, 4)
        self.policy.observe(0, 0, 0)  # nothing drafted: loads the kernel, learns nothing
        self.reset()
        cursor = prediction_cursor([1, 2])  # a memory cursor's kernels (a prediction's, the memory's)
        cursor.follow(np.array([1], dtype=np.int32))
        cursor.continuation(1)
        if self.corpus is not None:
            self.corpus.warm_up()

    # -- a draft: the best candidate of the sources, sized by the policy

    def _cap(self, limit: Optional[int]) -> int:
        return self.max_draft if limit is None else min(self.max_draft, limit)

    def _sources(self) -> list[tuple[str, MemoryCursor]]:
        """The sources matched beside the index, in the order ties go to them: the request's
        prediction, then the memory."""
        return [(source, cursor) for source, cursor in ((PREDICTION, self._prediction), (MEMORY, self._cursor))
                if cursor is not None]

    def candidate(self, limit: Optional[int] = None) -> Candidate:
        """The best continuation of up to min(max_draft, limit) tokens, before the policy sizes it
        (`plookup.app.bench.replay` measures the policy against an oracle that sizes it right):
        the longest match's (:meth:`_longest`), or the corpus's where the policy expects more
        tokens per verify cost of it, each weighed by its own source's calibration (ties: the
        longest match's)."""
        max_draft = self._cap(limit)
        own = self._longest(max_draft)
        if self.corpus is None:
            return own
        found = self.corpus.lookup(self.index.tokens[-self.corpus_match :], max_draft, self.corpus_match)
        if found.length < self.policy.min_match or found.tokens.size == 0:
            return own
        corpus = Candidate(found.tokens, found.agree, found.length, CORPUS)
        if own.match_length == 0:
            return corpus
        value = self.policy.value
        if value(corpus.match_length, corpus.agree, CORPUS) > value(own.match_length, own.agree, own.source):
            return corpus
        return own

    def _longest(self, max_draft: int) -> Candidate:
        """The index's own match, or the prediction's or the memory's where that is longer (ties:
        the index's, then in that order; a source whose match continues with nothing, at its
        text's end, gives way). A prediction (:func:`plookup.index.memory.prediction_cursor`) is a
        source beside the history, not history: its drafts are labelled PREDICTION, calibrated as
        the request's own, and count as neither memory nor corpus acceptances."""
        min_match = self.policy.min_match
        length = self.index.match()[0]
        best_length, best = length, None
        for source, cursor in self._sources():
            found = cursor.follow(self.index.tokens)
            if self.match_cap is not None:
                found = min(found, self.match_cap)  # measured as the index measures its own
            if found > best_length and found >= min_match:
                tokens, agree = cursor.continuation(max_draft)
                if tokens.size:
                    agree = agree if self.agreement else np.ones(len(agree))
                    best_length, best = found, Candidate(tokens, agree, found, source)
        if best is not None:
            return best
        if length < min_match:
            return NO_CANDIDATE
        return Candidate(*self.index.continuation(max_draft), length, REQUEST)

    def propose(self, limit: Optional[int] = None) -> Draft:
        """A :class:`~plookup.draft.values.Draft` of at most min(max_draft, limit) tokens: the
        candidate as long as the policy says it pays, or its first n tokens and a second branch
        (:meth:`_branch`); empty where no match is worth verifying."""
        max_draft = self._cap(limit)
        if max_draft <= 0:
            return NO_DRAFT
        candidate = self.candidate(max_draft)
        n = self.policy.choose(candidate.match_length, candidate.agree, candidate.source)
        branch = self._branch(candidate, max_draft)
        if branch is not None:
            n, fork = branch
            return candidate.draft(n, fork)
        return candidate.draft(n)

    def offer(self, limit: Optional[int] = None) -> tuple[Candidate, np.ndarray]:
        """(candidate, p): the continuation and p[k], the chance its tokens 0..k are all accepted,
        for a step whose drafts are sized together (:func:`plookup.draft.sizing.size_batch`)."""
        max_draft = self._cap(limit)
        if max_draft <= 0:
            return NO_CANDIDATE, np.zeros(0)
        candidate = self.candidate(max_draft)
        return candidate, self.policy.prefix_probabilities(candidate.match_length, candidate.agree, candidate.source)

    def _branch(self, candidate: Candidate, max_draft: int) -> Optional[tuple[int, Branch]]:
        """(n, branch) when a second branch at the candidate's first uncertain token pays
        beside its first n tokens, else None. Only the index's own match has a runner-up (a
        cursor, the prediction's or the memory's, drafts a single branch)."""
        uncertain = np.flatnonzero(candidate.agree < 1.0)
        if uncertain.size == 0 or not self.branches:
            return None
        k = int(uncertain[0])
        alt, alt_agree = EMPTY, EMPTY
        if self.runner_up is not None and candidate.source == REQUEST:
            alt, alt_agree = self.runner_up(k, max_draft - k - 1)  # leave draft[k] a place
        n_a, n_b = self.policy.choose_branches(candidate.match_length, candidate.agree, k, alt_agree, max_draft,
                                               source=candidate.source)
        if n_a == 0:
            return None
        return n_a, Branch(k, alt[:n_b])

    # -- verdicts

    def observe(self, draft: Draft, accepted: int) -> None:
        """The verdict on a proposal (the draft as verified: its :meth:`~plookup.draft.values.Draft.fork`
        where the target took the branch), which calibrates the policy."""
        if len(draft):
            self.policy.observe(draft.match_length, len(draft), accepted, draft.source)

    def observe_sampling(self, samples: int, most_likely: int) -> None:
        """At temperature > 0, how many sampled tokens were the model's most likely one."""
        self.policy.observe_sampling(samples, most_likely)

    # -- another of its kind

    def spawn(self) -> "IndexDrafter":
        """A drafter of the same kind and settings over an empty history (its memory and corpus
        shared)."""
        drafter = self._fresh()
        drafter.policy = DraftPolicy(self.policy.min_match, self.policy.cost, self.policy.past)
        drafter.max_draft, drafter.branches = self.max_draft, self.branches
        return drafter

    def _fresh(self) -> "IndexDrafter":
        """A drafter of this kind over an empty history: each kind's constructor."""
        raise NotImplementedError

    def __call__(self, input_ids: npt.NDArray[np.intc], /, **kwargs: Any) -> npt.NDArray[np.intc]:
        self.sync(input_ids)
        return self.propose(ADAPTER_MAX_DRAFT).tokens.astype(np.intc)

