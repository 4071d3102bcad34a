"""What the index classes share: a token history in `_tokens[:len(self)]` and arrays to account for."""

from __future__ import annotations

import numpy as np


class TokenArrays:
    _tokens: np.ndarray

    def __len__(self) -> int:
        raise NotImplementedError

    def _arrays(self) -> tuple[np.ndarray, ...]:
        raise NotImplementedError

    @property
    def tokens(self) -> np.ndarray:
        """Read-only int32 view of the history (stays valid, but stale, after growth)."""
        view = self._tokens[: len(self)]
        view.flags.writeable = False
        return view

    @property
    def nbytes(self) -> int:
        """Bytes held by the index's arrays."""
        return sum(a.nbytes for a in self._arrays())
