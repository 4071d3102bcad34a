"""Drafters: an index over the tokens seen so far, and a policy that turns its match into a draft.

Both drafters answer the same calls, so the decoder never knows which one it drives:

- ``start(tokens)``: a new generation: ``sync(tokens)`` and reset the policy's calibration;
- ``sync(tokens)``: make the index hold exactly ``tokens`` (appends only the new suffix when the
  indexed history is a prefix of them, rebuilds otherwise);
- ``extend(tokens)``: append verified tokens;
- ``propose(max_draft)``: up to ``max_draft`` int32 tokens, empty when there is no match worth it;
- ``observe(drafted, accepted)``: the verdict on the last proposal, which calibrates the policy;
- ``observe_sampling(samples, most_likely)``: at temperature > 0, how many sampled tokens were the
  model's most likely one (see :class:`plookup.policy.DraftPolicy`);
- ``finish()``: the generation is over (a :class:`SuffixDrafter` with a memory remembers it).

``last_source`` tells where the last proposal came from: "request" (the request's own index),
"memory" (a :class:`plookup.memory.GlobalMemory` of earlier requests) or None (nothing proposed).
``alternative`` is None, or ``(k, tokens)``: a second branch, ``draft[:k] + tokens``, that the
policy found worth verifying beside the draft in the same batch (``DraftPolicy.choose_branches``).

Each is also a ``llama_cpp.llama_speculative.LlamaDraftModel`` (``drafter(input_ids) -> draft``) for
``llama_cpp.Llama(draft_model=...)``, keeping its index incremental across those calls.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
from llama_cpp.llama_speculative import LlamaDraftModel

from .memory import GlobalMemory
from .ngram_index import NgramIndex
from .policy import DraftPolicy
from .suffix_index import SuffixIndex

EMPTY_DRAFT = np.zeros(0, dtype=np.int32)

# The LlamaDraftModel adapter has no verdict channel and pays llama-cpp-python's logits_all verify
# cost, so it drafts a fixed length like llama_cpp's own prompt-lookup drafter.
ADAPTER_MAX_DRAFT = 10


class IndexDrafter(LlamaDraftModel):
    """Shared plumbing: the index is the only copy of the history; the policy sizes drafts."""

    index: SuffixIndex | NgramIndex

    def __init__(self, index, min_match: int):
        self.index = index
        self.policy = DraftPolicy(min_match=min_match)
        self._last_match_length = 0
        self._candidate_source = "request"  # set by _candidate
        self.last_source: str | None = None
        self.alternative: tuple[int, np.ndarray] | None = None

    def start(self, tokens: npt.ArrayLike) -> None:
        """A new generation over `tokens`: sync the index, calibrate afresh."""
        self.sync(tokens)
        self.policy.start_request()

    def sync(self, tokens: npt.ArrayLike) -> None:
        tokens = np.asarray(tokens, dtype=np.int32)
        n = len(self.index)
        if not (n <= len(tokens) and np.array_equal(self.index.tokens, tokens[:n])):
            self.reset()
            n = 0
        self.extend(tokens[n:])

    def reset(self) -> None:
        """Forget the history."""
        self.index.reset()

    def extend(self, tokens: npt.ArrayLike) -> None:
        self.index.extend(tokens)

    def finish(self) -> None:
        """The generation over the indexed history is done."""

    def warm_up(self) -> None:
        """Compile or load every kernel a generation calls, leaving the index empty."""
        self.sync(np.array([1, 2, 4, 1, 2, 5, 1, 2], dtype=np.int32))  # "1 2" is followed by 4 or 5
        length, draft, agree = self._candidate(4)
        self.policy.choose(max(length, self.policy.min_match), agree)
        self._branch(max(length, self.policy.min_match), draft, agree, 4)
        self.policy.observe(0, 0, 0)  # nothing drafted: loads the kernel, learns nothing
        self.reset()

    def _candidate(self, max_draft: int) -> tuple[int, np.ndarray, np.ndarray]:
        """(match length, continuation tokens, per-token agreement) from the index."""
        raise NotImplementedError

    def _alternative(self, branch_point: int, max_len: int) -> tuple[np.ndarray, np.ndarray]:
        """(tokens, agree) of the runner-up continuation at the candidate's branch point."""
        return EMPTY_DRAFT, EMPTY_DRAFT

    def _branch(self, length: int, draft: np.ndarray, agree: np.ndarray, max_draft: int):
        """(n, alternative) when a second branch at the candidate's first uncertain token pays
        beside draft[:n], else None."""
        uncertain = np.flatnonzero(agree < 1.0)
        if uncertain.size == 0:
            return None
        k = int(uncertain[0])
        alt, alt_agree = self._alternative(k, max_draft - k - 1)  # leave draft[k] a place
        n_a, n_b = self.policy.choose_branches(length, agree, k, alt_agree, max_draft)
        if n_a == 0:
            return None
        return n_a, (k, alt[:n_b])

    def candidate(self, max_draft: int) -> np.ndarray:
        """The index's continuation of up to `max_draft` tokens before the policy sizes it
        (`plookup.replay` measures the policy against an oracle that sizes it right)."""
        self._candidate_source = "request"
        return self._candidate(max_draft)[1]

    def propose(self, max_draft: int) -> np.ndarray:
        self._last_match_length = 0
        self.last_source = None
        self.alternative = None
        if max_draft <= 0:
            return EMPTY_DRAFT
        self._candidate_source = "request"
        length, draft, agree = self._candidate(max_draft)
        n = self.policy.choose(length, agree)
        branch = self._branch(length, draft, agree, max_draft)
        if branch is not None:
            n, self.alternative = branch
        if n == 0:
            return EMPTY_DRAFT
        self._last_match_length = length
        self.last_source = self._candidate_source
        return draft[:n]

    def observe(self, drafted: int, accepted: int) -> None:
        if drafted:
            self.policy.observe(self._last_match_length, drafted, accepted)

    def observe_sampling(self, samples: int, most_likely: int) -> None:
        self.policy.observe_sampling(samples, most_likely)

    def __call__(self, input_ids: npt.NDArray[np.intc], /, **kwargs: Any) -> npt.NDArray[np.intc]:
        self.sync(input_ids)
        return self.propose(ADAPTER_MAX_DRAFT).astype(np.intc)


class SuffixDrafter(IndexDrafter):
    """Drafts from the longest earlier match of the whole current suffix (a suffix automaton).

    With a ``memory`` (:class:`plookup.memory.GlobalMemory`, may be shared by several drafters),
    the request's suffix is also matched against earlier requests, and the longer of the two
    matches drafts (ties: the request's own). ``finish()`` adds the history to the memory;
    ``memory_accepted`` counts the accepted tokens of memory drafts, over this drafter's life.
    """

    def __init__(self, min_match: int = 2, memory: GlobalMemory | None = None):
        super().__init__(SuffixIndex(), min_match)
        self.memory = memory
        self._cursor = memory.cursor() if memory is not None else None
        self._fed = 0  # history tokens fed to the cursor since its start
        self.memory_accepted = 0

    def reset(self) -> None:
        super().reset()
        self._fed = 0

    def warm_up(self) -> None:
        super().warm_up()
        if self.memory is not None:  # the memory may not match yet: load its kernels anyway
            scratch = GlobalMemory(8)
            scratch.add([1, 2])
            cursor = scratch.cursor()
            cursor.feed([1])
            cursor.continuation(1)

    def finish(self) -> None:
        if self.memory is not None:
            self.memory.add(self.index.tokens)

    def observe(self, drafted: int, accepted: int) -> None:
        super().observe(drafted, accepted)
        if self.last_source == "memory":
            self.memory_accepted += accepted

    def _memory_match(self) -> int:
        """Catch the cursor up with the history (lazily: one kernel call per proposal) and
        return its match length. A reset history or a changed memory restarts it."""
        cursor = self._cursor
        if cursor.stale or self._fed == 0 or self._fed > len(self.index):
            cursor.start()
            self._fed = 0
        cursor.feed(self.index.tokens[self._fed :])
        self._fed = len(self.index)
        return cursor.match_length()

    def _alternative(self, branch_point: int, max_len: int):
        if self._candidate_source != "request":
            return EMPTY_DRAFT, EMPTY_DRAFT  # the memory's cursor drafts a single branch
        return self.index.alternative(branch_point, max_len)

    def _candidate(self, max_draft: int):
        length, _, _ = self.index.match()
        if self._cursor is not None:
            memory_length = self._memory_match()
            if memory_length > length and memory_length >= self.policy.min_match:
                draft, agree = self._cursor.continuation(max_draft)
                if draft.size:
                    self._candidate_source = "memory"
                    return memory_length, draft, agree
        if length < self.policy.min_match:
            return 0, EMPTY_DRAFT, EMPTY_DRAFT
        draft, agree = self.index.continuation(max_draft)
        return length, draft, agree


class NgramDrafter(IndexDrafter):
    """Drafts from the most recent earlier occurrence of the longest matching n-gram (n ≤ n_max).

    Without a suffix structure there is no agreement statistic beyond the n-gram's own count, so
    every continuation token is trusted alike and the policy sizes the draft from n alone.
    """

    def __init__(self, n_min: int = 2, n_max: int = 8):
        super().__init__(NgramIndex(n_min=n_min, n_max=n_max), n_min)

    def _candidate(self, max_draft: int):
        n, end, _ = self.index.match()
        if n < self.policy.min_match:
            return 0, EMPTY_DRAFT, EMPTY_DRAFT
        draft = self.index.tokens[end + 1 : end + 1 + max_draft]
        return n, draft, np.ones(len(draft))
