"""The calls every drafter answers, and :class:`IndexDrafter`, the plumbing that the drafters of
:mod:`plookup.draft.drafters` share (a module of its own: the decoder, the API and the commands
drive any drafter through these calls, and need no drafter's own code):

- ``start(tokens, prediction=())``: a new generation: ``sync(tokens)``, reset the policy's
  calibration, and draft also from ``prediction`` (a Predicted Output's tokens);
- ``sync(tokens)``: make the index hold exactly ``tokens`` in an array of its own (appends only the
  new suffix when the indexed history is a prefix of them, rebuilds otherwise);
- ``extend(tokens)``: append verified tokens;
- ``bind(buffer, prompt, prediction=())``: the engine's ``start``: a new generation whose history
  is written in ``buffer`` (a slot's token buffer, borrowed: the one copy of it), called before
  its prompt is written there; ``cover(n)``: index the buffer's first ``n`` tokens, written since;
- ``propose(limit)``: a :class:`~plookup.draft.values.Draft` of at most ``min(max_draft, limit)`` tokens,
  empty when no match is worth verifying; it may carry a second branch
  (:meth:`DraftPolicy.choose_branches`) to verify beside it in the same batch;
- ``offer(limit)``: the candidate and its :meth:`DraftPolicy.prefix_probabilities`, for a batch
  of several sequences whose drafts are sized together (:func:`plookup.draft.sizing.size_batch`);
- ``observe(draft, accepted)``: the verdict on a proposal (the draft as verified: its
  :meth:`~plookup.draft.values.Draft.fork` when the target took the branch), which calibrates the policy;
- ``observe_sampling(samples, most_likely)``: at temperature > 0, how many sampled tokens were the
  model's most likely one (see :class:`plookup.draft.policy.DraftPolicy`);
- ``finish()``: the generation is over (a :class:`~plookup.draft.drafters.SuffixDrafter` with a memory
  remembers it);
- ``use_corpus(corpus)``: draft also from a static :class:`plookup.index.corpus.CorpusIndex` (suffix only).

``use_cost_curve`` gives a drafter this machine's verify costs; ``spawn()`` a fresh one of the same
kind and settings (another sequence of the same model).

Each drafts from the longest of three matches of the history's end: the request's own (its
index), its prediction's (:func:`plookup.index.memory.prediction_cursor`, a source of its own
beside the history, not history) and, for a suffix drafter with one, the cross-request memory's;
ties go in that order. A prediction's drafts are labelled PREDICTION: the policy calibrates them as
the request's own, and they count as neither memory nor corpus acceptances.

Each is also a ``llama_cpp.llama_speculative.LlamaDraftModel`` (``drafter(input_ids) -> tokens``) for
``llama_cpp.Llama(draft_model=...)``, keeping its index incremental across those calls.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional

import numpy as np
import numpy.typing as npt
from llama_cpp.llama_speculative import LlamaDraftModel

from ..index.corpus import CorpusIndex
from ..index.memory import GlobalMemory, MemoryCursor, prediction_cursor
from ..index.ngram import NgramIndex
from ..index.suffix import SuffixIndex
from .policy import DraftPolicy
from .values import EMPTY, NO_CANDIDATE, NO_DRAFT, PREDICTION, Branch, Candidate, Draft

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
    """Shared plumbing: the index reads the one copy of the history (its own array, or a slot's
    buffer it is bound to); the policy sizes drafts."""

    index: SuffixIndex | NgramIndex

    def __init__(self, index, min_match: int, max_draft: int = DEFAULT_MAX_DRAFT):
        self.index = index
        self.policy = DraftPolicy(min_match=min_match)
        self.max_draft = check_max_draft(max_draft)
        # Whether a draft may carry a second branch: plookup.Llama turns it off where two-branch
        # batches are not bitwise exact but single ones are (see plookup.measure.exactness).
        self.branches = True
        self._prediction: Optional[MemoryCursor] = None  # this generation's prediction, as a draft source

    def use_cost_curve(self, cost) -> None:
        """Size drafts for this verify-cost curve (see :mod:`plookup.measure.costs`)."""
        self.policy = DraftPolicy(self.policy.min_match, cost, self.policy.past)

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
        tokens = np.asarray(tokens, dtype=np.int32)
        if self.index.borrowed:  # used alone again: a history of its own
            self.index.release()
            self.reset()
        if not self._extends(tokens):
            self.reset()
        self.extend(tokens[len(self.index) :])

    def reset(self) -> None:
        """Forget the history (and what was fed of it to a prediction's cursor)."""
        self.index.reset()
        if self._prediction is not None:
            self._prediction.start()

    def extend(self, tokens: npt.ArrayLike) -> None:
        self.index.extend(tokens)

    def finish(self) -> None:
        """The generation over the indexed history is done: its prediction with it."""
        self._prediction = None

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
        warm_up_cursor()  # a prediction's source, and the memory's

    def candidate(self, limit: Optional[int] = None) -> Candidate:
        """The index's continuation of up to min(max_draft, limit) tokens, before the policy sizes
        it (`plookup.app.bench.replay` measures the policy against an oracle that sizes it right)."""
        return self._candidate(self._cap(limit))

    def _cap(self, limit: Optional[int]) -> int:
        return self.max_draft if limit is None else min(self.max_draft, limit)

    def _candidate(self, max_draft: int) -> Candidate:
        return self._own_candidate(max_draft)

    def _own_candidate(self, max_draft: int) -> Candidate:
        """The request's own match, or its prediction's (or the memory's) where that is longer
        (ties: the request's own, then the prediction's; a source whose match continues with
        nothing, at its text's end, gives way)."""
        length = self._match_length()
        best_length, best = length, None
        for source, cursor in self._sources():
            found = self._measured(cursor.follow(self.index.tokens))
            if found > best_length and found >= self.policy.min_match:
                tokens, agree = cursor.continuation(max_draft)
                if tokens.size:
                    best_length, best = found, Candidate(tokens, self._agreement(agree), found, source)
        if best is not None:
            return best
        if length < self.policy.min_match:
            return NO_CANDIDATE
        return self._continuation(length, max_draft)

    def _sources(self) -> list[tuple[str, MemoryCursor]]:
        """The request's other draft sources, in the order ties go to them."""
        return [] if self._prediction is None else [(PREDICTION, self._prediction)]

    def _match_length(self) -> int:
        """The length of the request's own match (the index's)."""
        return self.index.match()[0]

    def _continuation(self, length: int, max_draft: int) -> Candidate:
        """The request's own candidate for its match of `length` >= min_match."""
        raise NotImplementedError

    def _measured(self, length: int) -> int:
        """Another source's match length as this drafter measures its own."""
        return length

    def _agreement(self, agree: np.ndarray) -> np.ndarray:
        """Another source's agreement statistic as this drafter has its own."""
        return agree

    def _alternative(self, candidate: Candidate, branch_point: int, max_len: int) -> tuple[np.ndarray, np.ndarray]:
        """(tokens, agree) of the runner-up continuation at the candidate's branch point."""
        return EMPTY, EMPTY

    def _branch(self, candidate: Candidate, max_draft: int) -> Optional[tuple[int, Branch]]:
        """(n, branch) when a second branch at the candidate's first uncertain token pays
        beside its first n tokens, else None."""
        uncertain = np.flatnonzero(candidate.agree < 1.0)
        if uncertain.size == 0 or not self.branches:
            return None
        k = int(uncertain[0])
        alt, alt_agree = self._alternative(candidate, k, max_draft - k - 1)  # leave draft[k] a place
        n_a, n_b = self.policy.choose_branches(candidate.match_length, candidate.agree, k, alt_agree, max_draft,
                                               source=candidate.source)
        if n_a == 0:
            return None
        return n_a, Branch(k, alt[:n_b])

    def propose(self, limit: Optional[int] = None) -> Draft:
        max_draft = self._cap(limit)
        if max_draft <= 0:
            return NO_DRAFT
        candidate = self._candidate(max_draft)
        n = self.policy.choose(candidate.match_length, candidate.agree, candidate.source)
        branch = self._branch(candidate, max_draft)
        if branch is not None:
            n, fork = branch
            return candidate.draft(n, fork)
        return candidate.draft(n)

    def offer(self, limit: Optional[int] = None) -> tuple[Candidate, np.ndarray]:
        """(candidate, p): the continuation and p[k], the chance its tokens 0..k are all accepted."""
        max_draft = self._cap(limit)
        if max_draft <= 0:
            return NO_CANDIDATE, np.zeros(0)
        candidate = self._candidate(max_draft)
        return candidate, self.policy.prefix_probabilities(candidate.match_length, candidate.agree, candidate.source)

    def spawn(self) -> "IndexDrafter":
        """A drafter of the same kind and settings over an empty history."""
        drafter = self._fresh()
        drafter.policy = DraftPolicy(self.policy.min_match, self.policy.cost, self.policy.past)
        drafter.max_draft, drafter.branches = self.max_draft, self.branches
        return drafter

    def _fresh(self) -> "IndexDrafter":
        raise NotImplementedError

    def observe(self, draft: Draft, accepted: int) -> None:
        if len(draft):
            self.policy.observe(draft.match_length, len(draft), accepted, draft.source)

    def use_corpus(self, corpus: Optional[CorpusIndex]) -> None:
        """Draft also from `corpus` (None: no more)."""
        if corpus is not None:
            raise ValueError("only the suffix drafter drafts from a corpus")

    def observe_sampling(self, samples: int, most_likely: int) -> None:
        self.policy.observe_sampling(samples, most_likely)

    def __call__(self, input_ids: npt.NDArray[np.intc], /, **kwargs: Any) -> npt.NDArray[np.intc]:
        self.sync(input_ids)
        return self.propose(ADAPTER_MAX_DRAFT).tokens.astype(np.intc)


def warm_up_cursor() -> None:
    """Compile or load a memory cursor's kernels (a prediction's source, the memory's), which may
    match nothing yet."""
    scratch = GlobalMemory(8)
    scratch.add([1, 2])
    cursor = scratch.cursor()
    cursor.follow(np.array([1], dtype=np.int32))
    cursor.continuation(1)
