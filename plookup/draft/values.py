"""What a drafter hands the decoder, as values: a :class:`Candidate` before sizing, a :class:`Draft` after.

A draft carries everything its verdict is about (the match it came from, where it came from, its
second branch), so the decoder and the drafter never read the meaning of a proposal back from
attributes: ``draft = drafter.propose(n)``, verify it, ``drafter.observe(draft, accepted)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

# Where a draft's match was found: the request's own tokens, its Predicted Output (calibrated as
# the request's own: plookup.draft.policy), earlier requests (plookup.index.memory), a static corpus
# of the user's files (plookup.index.corpus).
REQUEST, PREDICTION, MEMORY, CORPUS = "request", "prediction", "memory", "corpus"


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
    source: Optional[str] = None  # REQUEST, PREDICTION, MEMORY or CORPUS; None for an empty draft
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


@dataclass(frozen=True)
class Speculative:
    """One request's control of its drafts, in llama-server's terms: at most ``n_max`` draft tokens
    a step (None: the drafter's own bound; 0: plain decoding), a draft shorter than ``n_min``
    dropped, and a draft cut before the first token whose chance of acceptance, given the ones
    before it accepted (the policy's estimate), is below ``p_min``."""

    n_max: Optional[int] = None
    n_min: int = 0
    p_min: float = 0.0

    def __post_init__(self):
        for name in ("n_max", "n_min"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ValueError(f"speculative.{name} must be an integer >= 0, got {value!r}")
        if isinstance(self.p_min, bool) or not isinstance(self.p_min, (int, float)) or not 0 <= self.p_min <= 1:
            raise ValueError(f"speculative.p_min must be a number in [0, 1], got {self.p_min!r}")

    @classmethod
    def of(cls, value) -> "Speculative":
        """A request's ``speculative`` field: None, a Speculative, or a mapping of its fields."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if not isinstance(value, dict):
            raise ValueError(f"speculative must be an object with n_max, n_min, p_min, got {value!r}")
        unknown = sorted(set(value) - {"n_max", "n_min", "p_min"})
        if unknown:
            raise ValueError(f"speculative.{unknown[0]} is not a field plookup takes (n_max, n_min, p_min)")
        return cls(**value)

    def cut(self, p: np.ndarray) -> np.ndarray:
        """Prefix probabilities `p` (p[k]: tokens 0..k all accepted) up to the first token whose
        own chance, p[k] / p[k - 1], is below p_min."""
        if self.p_min <= 0 or len(p) == 0:
            return p
        before = np.concatenate(([1.0], p[:-1]))
        own = np.divide(p, before, out=np.zeros(len(p)), where=before > 0)
        below = np.flatnonzero(own < self.p_min)
        return p[: below[0]] if below.size else p


PLAIN = Speculative(n_max=0)
