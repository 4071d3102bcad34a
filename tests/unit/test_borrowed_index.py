"""An index over a borrowed buffer (plookup.index.tokens: a slot's token buffer, which the engine
writes and the index reads) answers as the same index over its own copy, on random histories; it
never grows the buffer nor writes other tokens into it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plookup.index.ngram import NgramIndex
from plookup.index.suffix import SuffixIndex

PROPERTY = settings(max_examples=200, deadline=None)
ROOM = 8  # the buffer's tokens past the longest history: never written by the index


def index_of(kind: str):
    """An index of `kind` whose own arrays start as small as they can (they grow at once)."""
    return SuffixIndex(capacity=1) if kind == "suffix" else NgramIndex(1, 6, capacity=1)


def answers(index, max_len: int = 12):
    """Everything a drafter reads of an index."""
    if isinstance(index, NgramIndex):
        return index.match(), [index.lookup(n) for n in range(index.n_min, index.n_max + 1)]
    draft, agree = index.continuation(max_len)
    alternative = index.alternative(0, max_len) if len(draft) else None
    fed = index.feed(index.tokens[-3:]) if len(index) else None
    return (index.match(), draft.tolist(), agree.tolist(), fed,
            alternative and (alternative[0].tolist(), alternative[1].tolist()))


# (chunk, whether the history is forgotten before it)
steps = st.lists(st.tuples(st.lists(st.integers(0, 3), max_size=9), st.booleans()), max_size=25)


@PROPERTY
@given(kind=st.sampled_from(["suffix", "ngram"]), ops=steps)
def test_an_index_over_a_borrowed_buffer_answers_as_one_over_its_own_copy(kind, ops):
    buffer = np.full(sum(len(chunk) for chunk, _ in ops) + ROOM, 77, dtype=np.int32)
    own, borrowed = index_of(kind), index_of(kind)
    borrowed.bind(buffer)
    history: list[int] = []
    for chunk, forget in ops:
        if forget:
            own.reset()
            borrowed.reset()
            history = []
        buffer[len(history) : len(history) + len(chunk)] = chunk  # the engine writes ...
        history += chunk
        own.extend(chunk)
        borrowed.cover(len(history))  # ... and the index reads it there
        assert borrowed.tokens.tolist() == own.tokens.tolist() == history
        assert answers(borrowed) == answers(own)
    assert borrowed._tokens is buffer and borrowed.tokens.base is buffer  # no array of its own
    assert borrowed.nbytes < own.nbytes  # nor counted as its own
    assert (buffer[len(history) :] == 77).all() or any(forget for _, forget in ops)


@pytest.mark.parametrize("kind", ["suffix", "ngram"])
def test_a_borrowed_buffer_is_never_grown_nor_written_with_other_tokens(kind):
    buffer = np.array([1, 2, 3, 1, 2, 3, 1, 2], dtype=np.int32)
    index = index_of(kind)
    index.bind(buffer)
    index.cover(8)  # a history as long as the buffer fits
    before = answers(index)
    with pytest.raises(ValueError, match="do not fit the borrowed buffer of 8"):
        index.cover(9)
    with pytest.raises(ValueError, match="indexes what is written there"):
        index.extend([1])
    with pytest.raises(ValueError, match="shorter than the 8 indexed"):
        index.cover(7)
    assert len(index) == 8 and answers(index) == before and index._tokens is buffer
    assert buffer.tolist() == [1, 2, 3, 1, 2, 3, 1, 2]
    index.release()  # its own array again, empty; the buffer left as it was
    index.extend([5, 6, 5])
    assert index.tokens.tolist() == [5, 6, 5] and not index.borrowed
    assert buffer.tolist() == [1, 2, 3, 1, 2, 3, 1, 2]
    with pytest.raises(ValueError, match="bind"):
        index.cover(3)
    with pytest.raises(ValueError, match="int32"):
        index.bind(np.zeros(8, dtype=np.int64))
