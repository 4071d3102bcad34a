"""Cross-request memory: streaming match kernels against brute force, eviction bound, save/load,
drafter integration (a real model's second request drafting from the first one:
tests/model/test_memory_drafting.py)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plookup.draft.drafters import SuffixDrafter
from plookup.index.memory import KEEP_FRACTION, SEP, GlobalMemory
from plookup.index.suffix import SuffixIndex
from plookup.native import suffix_automaton as sam
from plookup.native.suffix_automaton import WALK_CAP

from support import reference_index as ref

# Texts <= WALK_CAP tokens keep COUNT/RECENT exact (see test_kernels.py).
MAX_TEXT = 256
assert MAX_TEXT <= WALK_CAP
PROPERTY = settings(max_examples=400, deadline=None)


# -- brute force, straight from the definitions


def match_end(index: SuffixIndex, state: int, length: int) -> int:
    """The most recent end in the history of a streaming match's string, read off its automaton
    state (-1 for no match): what state_continuation drafts after."""
    return int(index._states[state, sam.RECENT]) if length >= 1 and state > 0 else -1


def stream_match(text: list[int], stream: list[int]) -> tuple[int, int]:
    """(L, end): the longest suffix of `stream` occurring in `text`, and its latest end there."""
    best = (0, -1)
    for length in range(1, len(stream) + 1):
        ends = ref._ends_of(text, stream[len(stream) - length :], len(text) - 1)
        if not ends:
            break  # a longer suffix contains this one, so cannot occur either
        best = (length, max(ends))
    return best


def stream_continuation(text, stream, max_len) -> tuple[list[int], list[float]]:
    """What followed the match's latest occurrence (to the end of the text), with
    agree[k] = occ(w_k + t) / (occurrences of w_k that have a next token)."""
    n = len(text)
    length, end = stream_match(text, stream)
    draft: list[int] = []
    agree: list[float] = []
    if length < 1:
        return draft, agree
    context = stream[len(stream) - length :]
    while len(draft) < max_len and end + 1 + len(draft) <= n - 1:
        token = text[end + 1 + len(draft)]
        followable = len(ref._ends_of(text, context, n - 2))
        context = context + [token]
        agree.append(len(ref._ends_of(text, context, n - 1)) / followable)
        draft.append(token)
    return draft, agree


def memory_match(documents: list[list[int]], stream: list[int], max_len: int):
    """Memory semantics from the documents alone: the longest suffix of the stream occurring
    inside one document; its latest occurrence (newest document first); the rest of that
    document after it; agree counts occurrences over all documents, a document's end being one
    more (disagreeing) continuation."""

    def occurrences(pattern):
        return [(d, e) for d, doc in enumerate(documents) for e in ref._ends_of(doc, pattern, len(doc) - 1)]

    length, latest = 0, None
    for size in range(1, len(stream) + 1):
        found = occurrences(stream[len(stream) - size :])
        if not found:
            break
        length, latest = size, max(found)
    if not length:
        return 0, [], []
    d, end = latest
    context = stream[len(stream) - length :]
    draft = documents[d][end + 1 : end + 1 + max_len]
    agree = []
    for token in draft:
        followable = len(occurrences(context))
        context = context + [token]
        agree.append(len(occurrences(context)) / followable)
    return length, draft, agree


# -- kernels via SuffixIndex.feed / state_continuation


alphabets = st.sampled_from([[0, 1], [0, 1, 2, 3], [5, 262143, 2**31 - 1]])


@st.composite
def text_and_stream(draw):
    alphabet = draw(alphabets)
    size = draw(st.integers(0, MAX_TEXT))
    text = draw(st.lists(st.sampled_from(alphabet), min_size=size, max_size=size))
    # The stream mixes the alphabet, a token the text never has and the odd out-of-range one.
    pieces = st.sampled_from(alphabet + [7, -1])
    stream = draw(st.lists(pieces, max_size=60))
    if text and draw(st.booleans()):  # splice in a copy of part of the text: long matches
        start = draw(st.integers(0, len(text) - 1))
        at = draw(st.integers(0, len(stream)))
        stream[at:at] = text[start : start + draw(st.integers(1, 80))]
    return text, stream


@PROPERTY
@given(case=text_and_stream(), max_len=st.integers(1, 20), chunk=st.integers(1, 8))
def test_feed_matches_brute_force(case, max_len, chunk):
    text, stream = case
    index = SuffixIndex(capacity=3)
    index.extend(text)
    state, length = 0, 0
    assert index.state_continuation(state, length, max_len)[0].size == 0
    for i in range(0, len(stream), chunk):
        state, length = index.feed(stream[i : i + chunk], state, length)
        fed = [t if 0 <= t <= 2**31 - 1 else None for t in stream[: i + chunk]]
        # An out-of-range token matches nothing: only what follows the last one can match.
        last_bad = max((j for j, t in enumerate(fed) if t is None), default=-1)
        tail = fed[last_bad + 1 :]
        want_length, want_end = stream_match(text, tail)
        assert (length, match_end(index, state, length)) == (want_length, want_end)
        draft, agree = index.state_continuation(state, length, max_len)
        want_draft, want_agree = stream_continuation(text, tail, max_len)
        assert draft.dtype == np.int32 and agree.dtype == np.float64
        assert draft.tolist() == want_draft
        np.testing.assert_allclose(agree, want_agree, rtol=0, atol=1e-12)


@PROPERTY
@given(
    documents=st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=40), max_size=6),
    stream=st.lists(st.sampled_from([0, 1, 2, 3, SEP]), max_size=40),
    max_len=st.integers(1, 20),
)
def test_memory_cursor_matches_brute_force(documents, stream, max_len):
    memory = GlobalMemory(max_tokens=10_000)
    for doc in documents:
        memory.add(doc)
    assert [d.tolist() for d in memory.documents_tokens()] == documents
    cursor = memory.cursor()
    cursor.feed(stream)
    tail = stream[max((j for j, t in enumerate(stream) if t == SEP), default=-1) + 1 :]
    want_length, want_draft, want_agree = memory_match(documents, tail, max_len)
    assert cursor.match_length() == want_length
    draft, agree = cursor.continuation(max_len)
    assert draft.tolist() == want_draft
    np.testing.assert_allclose(agree, want_agree, rtol=0, atol=1e-12)


def test_continuation_still_agrees_with_brute_force_after_refactor():
    # sam_continuation now runs through the shared loop; one fixed case beside test_kernels'.
    history = [0, 1, 2, 0, 1, 3, 0, 1, 2, 0, 1]
    index = SuffixIndex()
    index.extend(history)
    draft, agree = index.continuation(8)
    want_draft, want_agree = ref.suffix_continuation(history, 8)
    assert draft.tolist() == want_draft and np.allclose(agree, want_agree)


# -- bound, eviction, save/load


def test_eviction_keeps_the_bound_fifo_order_and_memory():
    rng = np.random.default_rng(0)
    max_tokens = 5_000
    memory = GlobalMemory(max_tokens)
    added: list[list[int]] = []
    most_documents = 0
    for _ in range(300):
        doc = rng.integers(0, 50_000, size=int(rng.integers(1, 700))).tolist()
        memory.add(doc)
        added.append(doc)
        held = [d.tolist() for d in memory.documents_tokens()]
        # The newest documents, oldest first, and nothing else.
        assert held == added[len(added) - len(held) :]
        assert len(memory) == sum(map(len, held)) <= max_tokens
        assert memory.documents == len(held)
        most_documents = max(most_documents, len(held))
        # Bound from plookup/index/memory.py's docstring.
        assert memory.nbytes <= 280 * (max_tokens + memory.documents) + 1024 + 8 * memory.documents
    assert len(memory) >= KEEP_FRACTION * max_tokens - 700  # eviction stops near the low-water mark
    # A document over the bound keeps its newest max_tokens tokens.
    big = rng.integers(0, 100, size=max_tokens + 10)
    memory.add(big)
    assert [d.tolist() for d in memory.documents_tokens()] == [big[-max_tokens:].tolist()]


def test_save_load_round_trip(tmp_path):
    rng = np.random.default_rng(1)
    memory = GlobalMemory(2_000)
    for _ in range(30):
        memory.add(rng.integers(0, 8, size=int(rng.integers(1, 200))))
    path = tmp_path / "memory.bin"  # written under exactly this name
    memory.save(path)
    loaded = GlobalMemory.load(path)
    assert loaded.max_tokens == memory.max_tokens and len(loaded) == len(memory)
    assert [d.tolist() for d in loaded.documents_tokens()] == [
        d.tolist() for d in memory.documents_tokens()
    ]
    for _ in range(20):
        stream = rng.integers(0, 8, size=int(rng.integers(1, 50)))
        answers = []
        for m in (memory, loaded):
            cursor = m.cursor()
            cursor.feed(stream)
            draft, agree = cursor.continuation(16)
            answers.append((cursor.match_length(), draft.tolist(), agree.tolist()))
        assert answers[0] == answers[1]
    empty = tmp_path / "empty.npz"
    GlobalMemory(10).save(empty)
    assert len(GlobalMemory.load(empty)) == 0


def test_saved_file_is_owner_only_names_its_vocabulary_and_takes_a_new_bound(tmp_path):
    memory = GlobalMemory(100)
    for document in ([1, 2, 3], [4, 5, 6, 7], [8, 9]):
        memory.add(document)
    path = tmp_path / "memory.npz"
    memory.save(path, vocabulary="49152:abc")
    assert path.stat().st_mode & 0o777 == 0o600 and [p.name for p in tmp_path.iterdir()] == ["memory.npz"]
    assert len(GlobalMemory.load(path, vocabulary="49152:abc")) == 9
    with pytest.raises(ValueError, match="another model's vocabulary"):
        GlobalMemory.load(path, vocabulary="151936:def")
    smaller = GlobalMemory.load(path, max_tokens=6)  # the oldest documents go first
    assert smaller.max_tokens == 6 and [d.tolist() for d in smaller.documents_tokens()] == [[4, 5, 6, 7], [8, 9]]


@pytest.mark.parametrize("content", [b"", b"not a zip at all", b"PK\x03\x04 broken"])
def test_corrupt_memory_file_is_an_error_naming_it(tmp_path, content):
    path = tmp_path / "memory.npz"
    path.write_bytes(content)
    with pytest.raises(ValueError, match="not a plookup memory file") as error:
        GlobalMemory.load(path)
    assert str(path) in str(error.value)


@pytest.mark.parametrize("max_tokens", [0, -1, 1.5, None])
def test_bad_bound_raises(max_tokens):
    with pytest.raises(ValueError, match="max_tokens"):
        GlobalMemory(max_tokens)


@pytest.mark.parametrize("doc", [[1, SEP], [-1], [2**31], [[1, 2]], [1.5]])
def test_bad_documents_raise_and_add_nothing(doc):
    memory = GlobalMemory(100)
    memory.add([3, 4])
    with pytest.raises(ValueError):
        memory.add(doc)
    assert [d.tolist() for d in memory.documents_tokens()] == [[3, 4]]


def test_add_makes_open_cursors_stale():
    memory = GlobalMemory(100)
    memory.add([1, 2, 3, 4])
    cursor = memory.cursor()
    cursor.feed([1, 2])
    assert cursor.match_length() == 2
    memory.add([9, 9])
    assert cursor.stale and cursor.match_length() == 0 and cursor.continuation(4)[0].size == 0
    cursor.start()
    cursor.feed([1, 2])
    assert cursor.continuation(4)[0].tolist() == [3, 4]


# -- drafter


def test_drafter_drafts_from_memory_and_counts_accepted():
    memory = GlobalMemory(1_000)
    first = SuffixDrafter(memory=memory)
    request = list(range(100, 160))
    first.sync(request)
    first.finish()
    assert len(memory) == len(request)

    second = SuffixDrafter(memory=memory)
    second.sync([7, 8, *request[:10]])  # a different start, then the old text again
    draft = second.propose(8)
    assert draft.source == "memory" and draft.tokens.tolist() == request[10 : 10 + len(draft)]
    assert len(draft) > 0 and draft.match_length == 10
    second.observe(draft, 2)
    second.extend(request[10:12])
    # Its own history now repeats a longer suffix than memory holds: own index wins.
    second.extend([7, 8, *request[:12]])
    own = second.propose(8)
    assert own.tokens.tolist()[:2] == [7, 8]  # what followed its earlier copy
    assert own.source == "request" and own.match_length == 14


# -- a real model: a near-identical second request drafts from the first one's output
