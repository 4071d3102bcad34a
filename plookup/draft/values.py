"""What a drafter hands the decoder, as values: a :class:`Candidate` before sizing, a :class:`Draft` after.

A draft carries everything its verdict is about (the match it came from, where it came from, its
second branch), so the decoder and the drafter never read the meaning of a proposal back from
attributes: ``draft = drafter.propose(n)``, verify it, ``drafter.observe(draft, accepted)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

# Where a draft's match was found: the request's own tokens, earlier requests (plookup.index.memory),
# a static corpus of the user's files (plookup.index.corpus).
REQUEST, MEMORY, CORPUS = "request", "memory", "corpus"


def frozen_tokens(tokens) -> np.ndarray:
    """`tokens` as a read-only int32 array (a value must not change under its holder)."""
    array = np.array(tokens, dtype=np.int32)
    array.flags.writeable = False
    return array


EMPTY = frozen_tokens([])


@dataclass(frozen=True, eq=False)
class Branch:
    """A second continuation: the fork ``draft.tokens[:at] + tokens``, verified beside the draft."""

    at: int  # the draft position where the two continuations part
    tokens: np.ndarray  # the fork's tokens from position `at` on; tokens[0] != draft.tokens[at]


@dataclass(frozen=True, eq=False)
class Draft:
    """Tokens to verify after the pending token, and what they were drafted from."""

    tokens: np.ndarray  # int32, read-only
    match_length: int = 0  # length of the match whose continuation the tokens are
    source: Optional[str] = None  # REQUEST, MEMORY or CORPUS; None for an empty draft
    branch: Optional[Branch] = None

    def __len__(self) -> int:
        return len(self.tokens)

    def fork(self) -> "Draft":
        """The draft along its branch: what was verified when the target took the branch."""
        tokens = frozen_tokens([*self.tokens[: self.branch.at], *self.branch.tokens])
        return Draft(tokens, self.match_length, self.source)


NO_DRAFT = Draft(EMPTY)


@dataclass(frozen=True, eq=False)
class Candidate:
    """An index's continuation of the current suffix, before the policy sizes it."""

    tokens: np.ndarray  # int32: what followed the match's most recent earlier occurrence
    agree: np.ndarray  # per token: the share of the context's occurrences that went on with it
    match_length: int
    source: str

    def draft(self, n: int, branch: Optional[Branch] = None) -> Draft:
        """Its first `n` tokens as a draft (nothing for n = 0)."""
        if n == 0:
            return NO_DRAFT
        return Draft(frozen_tokens(self.tokens[:n]), self.match_length, self.source, branch)


NO_CANDIDATE = Candidate(EMPTY, np.zeros(0), 0, REQUEST)
