"""What the index classes share: token input checks, a history in `_tokens[:len(self)]`, arrays to count."""

from __future__ import annotations

import numpy as np


def as_token_array(tokens) -> np.ndarray:
    """`tokens` (an int sequence or array) as a 1-D int64 array; ValueError otherwise.

    The range check ([0, 2**31 - 1]) happens in the kernels, which reject the whole
    batch before appending anything.
    """
    array = np.asarray(tokens)
    if array.ndim != 1:
        raise ValueError(f"tokens must be a 1-D sequence, got {array.ndim}-D")
    if array.size and array.dtype.kind not in "iu":
        raise ValueError(f"tokens must be integers, got dtype {array.dtype}")
    return array.astype(np.int64, copy=False)


def raise_bad_token(tokens: np.ndarray, index: int) -> None:
    raise ValueError(f"token {tokens[index]} at index {index} is outside [0, 2**31 - 1]")


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
