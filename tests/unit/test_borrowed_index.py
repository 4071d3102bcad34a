"""An index over a borrowed buffer (plookup.index.tokens: a slot's token buffer, which the engine
writes and the index reads) answers as the same index over its own copy, on random histories; it
never grows the buffer nor writes other tokens into it; and a drafter bound to a buffer drafts as
one fed the same history by ``start``/``extend`` (the engine's calls against the standalone ones),
forgetting what it indexed where a new prompt does not begin with it, or where it is bound to
another buffer."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plookup.draft.drafters import NgramDrafter, SuffixDrafter
from plookup.index.memory import GlobalMemory
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


# -- drafters


def drafter_of(kind: str):
    if kind == "suffix+memory":
        return SuffixDrafter(memory=GlobalMemory(1 << 12))
    return SuffixDrafter() if kind == "suffix" else NgramDrafter(n_min=2, n_max=5)


requests = st.lists(
    st.tuples(
        st.integers(0, 60),  # how much of the previous history the new prompt repeats
        st.lists(st.integers(0, 4), min_size=1, max_size=10),  # the rest of the prompt
        st.lists(st.lists(st.integers(0, 4), min_size=1, max_size=6), max_size=8),  # verdicts' tokens
    ),
    min_size=1, max_size=6,
)


@PROPERTY
@given(kind=st.sampled_from(["suffix", "ngram", "suffix+memory"]), script=requests, limit=st.integers(1, 12))
def test_a_drafter_bound_to_a_buffer_drafts_as_one_fed_by_start_and_extend(kind, script, limit):
    buffer = np.zeros(sum(r[0] + len(r[1]) + sum(map(len, r[2])) for r in script) + ROOM, dtype=np.int32)
    bound, alone = drafter_of(kind), drafter_of(kind)
    history: list[int] = []
    for keep, tail, verdicts in script:
        prompt = history[: keep % (len(history) + 1)] + tail
        bound.bind(buffer, prompt)  # as admission: bound before the prompt is written ...
        buffer[: len(prompt)] = prompt
        bound.cover(len(prompt))  # ... and indexed once it is
        alone.start(prompt)
        history = list(prompt)
        for emitted in verdicts:
            a, b = bound.propose(limit), alone.propose(limit)
            assert (a.tokens.tolist(), a.match_length, a.source) == (b.tokens.tolist(), b.match_length, b.source)
            accepted = len(a) // 2
            bound.observe(a, accepted)
            alone.observe(b, accepted)
            buffer[len(history) : len(history) + len(emitted)] = emitted
            history += emitted
            bound.cover(len(history))
            alone.extend(emitted)
            assert bound.index.tokens.tolist() == alone.index.tokens.tolist() == history
        bound.finish()
        alone.finish()
    assert bound.index.bound_to(buffer) and not alone.index.borrowed


def test_a_new_prompt_keeps_the_indexed_history_only_where_it_begins_with_it():
    """Compared before the new prompt is written: after, the buffer would say yes to any prompt."""
    buffer = np.zeros(64, dtype=np.int32)
    drafter = SuffixDrafter()
    first = [5, 6, 7, 8, 5, 6, 9]
    drafter.bind(buffer, first)
    buffer[: len(first)] = first
    drafter.cover(len(first))
    buffer[7:10] = [1, 2, 3]  # its output
    drafter.cover(10)

    follow_up = first + [1, 2, 3, 4]  # repeats the whole history: kept
    drafter.bind(buffer, follow_up)
    assert len(drafter.index) == 10
    buffer[: len(follow_up)] = follow_up
    drafter.cover(len(follow_up))

    changed = [5, 6, 7, 0, 5, 6, 7, 8, 5, 6]  # differs at position 3: forgotten
    drafter.bind(buffer, changed)
    assert len(drafter.index) == 0
    buffer[: len(changed)] = changed
    drafter.cover(len(changed))
    fresh = SuffixIndex()
    fresh.extend(changed)
    assert answers(drafter.index) == answers(fresh)

    drafter.bind(buffer, changed[:4])  # shorter than the history indexed: forgotten too
    assert len(drafter.index) == 0


def test_a_drafter_bound_to_another_buffer_starts_over_on_it():
    """By identity: llama_cpp's load_state replaces input_ids by an array of equal tokens, which
    the index must read from then on (the old one is no longer slot 0's)."""
    first, second = np.zeros(32, dtype=np.int32), np.zeros(32, dtype=np.int32)
    prompt = [3, 4, 3, 4, 3]
    drafter = NgramDrafter()
    for buffer in (first, second):
        buffer[: len(prompt)] = prompt
    drafter.bind(first, prompt)
    drafter.cover(len(prompt))
    drafter.bind(second, prompt)
    assert drafter.index.bound_to(second) and not drafter.index.bound_to(first) and len(drafter.index) == 0
    drafter.cover(len(prompt))
    first[:] = 9  # the old buffer, written by anyone: nothing the drafter reads
    assert drafter.index.tokens.tolist() == prompt and drafter.candidate(4).tokens.tolist() == [4, 3]


def test_a_drafter_used_alone_again_takes_an_array_of_its_own():
    """warm_up, the LlamaDraftModel adapter, a replay: ``sync`` never writes into a buffer."""
    buffer = np.zeros(16, dtype=np.int32)
    buffer[:4] = [1, 2, 1, 2]
    drafter = SuffixDrafter()
    drafter.bind(buffer, [1, 2, 1, 2])
    drafter.cover(4)
    drafter.warm_up()
    assert not drafter.index.borrowed and len(drafter.index) == 0
    drafter(np.array([7, 8, 7], dtype=np.intc))
    assert drafter.index.tokens.tolist() == [7, 8, 7] and buffer[:4].tolist() == [1, 2, 1, 2]
