"""What the index classes share: token input checks, arrays to count, and the history they index,
``_tokens[:len(self)]``, in one of two arrays:

- an array of the index's own, grown by doubling: the index used alone (a drafter driven by
  ``sync``/``extend``, the cross-request memory, a benchmark's replay);
- a borrowed buffer (:meth:`TokenArrays.bind`): a slot's token buffer, which the engine writes and
  the index reads, so that a generation's history is kept once. The index never grows it (its
  capacity is the buffer's) and never writes other tokens into it: :meth:`TokenArrays.cover`
  indexes tokens already written there. Whether they are still the ones it indexed is the
  binder's to know (:meth:`plookup.draft.index_drafter.IndexDrafter.bind`).
"""

from __future__ import annotations

import numpy as np

OWN_CAPACITY = 1024  # an index's own array, to begin with


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
    _borrowed: bool = False

    def __len__(self) -> int:
        raise NotImplementedError

    def _arrays(self) -> tuple[np.ndarray, ...]:
        raise NotImplementedError

    def _append(self, new_tokens: np.ndarray) -> None:
        """Index int64 `new_tokens` after the history (the token array has room for them)."""
        raise NotImplementedError

    def reset(self) -> None:
        raise NotImplementedError

    # -- the history's array

    def _own(self, capacity: int) -> None:
        self._tokens, self._borrowed = np.empty(capacity, np.int32), False

    def bind(self, buffer: np.ndarray) -> None:
        """Index `buffer` from now on, from its start, empty until :meth:`cover`: borrowed, not
        copied (a 1-D C-contiguous int32 array, e.g. llama_cpp's ``input_ids``)."""
        if buffer.dtype != np.int32 or buffer.ndim != 1 or not buffer.flags.c_contiguous or not buffer.flags.writeable:
            raise ValueError(f"an index binds a writable 1-D C-contiguous int32 buffer, got {buffer.dtype} "
                             f"{buffer.ndim}-D")
        self._tokens, self._borrowed = buffer, True
        self.reset()

    def release(self) -> None:
        """Back to an array of the index's own, empty (the buffer it borrowed is left as it is)."""
        self._own(OWN_CAPACITY)
        self.reset()

    @property
    def borrowed(self) -> bool:
        """Whether the history is a borrowed buffer's (:meth:`bind`)."""
        return self._borrowed

    def bound_to(self, buffer: np.ndarray) -> bool:
        """Whether the index reads `buffer` itself (the very array, not equal values)."""
        return self._borrowed and self._tokens is buffer

    def _room(self, needed: int) -> None:
        """A token array of at least `needed` tokens: an own one grown by doubling; a borrowed one
        never (ValueError, nothing indexed)."""
        capacity = self._tokens.size
        if needed <= capacity:
            return
        if self._borrowed:
            raise ValueError(f"{needed} tokens do not fit the borrowed buffer of {capacity}")
        while capacity < needed:
            capacity *= 2
        tokens = self._tokens
        self._tokens = np.empty(capacity, np.int32)
        self._tokens[: len(self)] = tokens[: len(self)]

    # -- indexing

    def extend(self, tokens) -> None:
        """Index `tokens` after the history, in the index's own array."""
        if self._borrowed:
            raise ValueError("an index over a borrowed buffer indexes what is written there: cover(n), "
                             "or release() it first")
        new_tokens = as_token_array(tokens)
        self._room(len(self) + new_tokens.size)
        self._append(new_tokens)

    def cover(self, n: int) -> None:
        """Index the borrowed buffer's tokens up to its first `n` (written there since the last
        call). The kernels write each token they index at its place: here the very value that is
        there already."""
        if not self._borrowed:
            raise ValueError("cover(n) indexes a borrowed buffer: bind() one first")
        if n < len(self):
            raise ValueError(f"the buffer's history ({n} tokens) is shorter than the {len(self)} indexed")
        self._room(n)
        self._append(as_token_array(self._tokens[len(self) : n]))

    # -- reading

    @property
    def tokens(self) -> np.ndarray:
        """Read-only int32 view of the history (an own array's stays valid, but stale, after growth;
        a borrowed buffer's is what is written there now)."""
        view = self._tokens[: len(self)]
        view.flags.writeable = False
        return view

    @property
    def nbytes(self) -> int:
        """Bytes held by the index's arrays (a borrowed buffer is not the index's)."""
        return sum(a.nbytes for a in self._arrays() if not (self._borrowed and a is self._tokens))
