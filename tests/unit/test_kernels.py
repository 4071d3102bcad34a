"""SuffixIndex / NgramIndex against brute force, at scale, and under numba's boundscheck."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plookup.index.ngram import NgramIndex
from plookup.index.suffix import SuffixIndex
from plookup.native.suffix_automaton import WALK_CAP

from support import reference_index as ref

# Histories stay <= MAX_HISTORY <= WALK_CAP tokens: a suffix-link path never has more
# non-root states than the history has tokens, so COUNT/RECENT are exact and the
# kernels must agree with brute force exactly.
MAX_HISTORY = 200
assert MAX_HISTORY <= WALK_CAP

LARGE_IDS = [262140, 262141, 262142, 262143]
PROPERTY = settings(max_examples=500, deadline=None)


@st.composite
def chunked_histories(draw) -> list[list[int]]:
    """A history over a small alphabet (so suffixes repeat), cut into 1..8-token chunks."""
    alphabet = draw(
        st.one_of(
            st.just([0, 1, 2, 3]),
            st.lists(st.sampled_from([0, 1, 262143, 2**31 - 1]), min_size=1, max_size=2, unique=True),
            st.just(LARGE_IDS),
        )
    )
    # Drawing the length first spreads sizes up to MAX_HISTORY; plain st.lists stays short.
    size = draw(st.integers(0, MAX_HISTORY))
    history = draw(st.lists(st.sampled_from(alphabet), min_size=size, max_size=size))
    chunks = []
    start = 0
    while start < len(history):
        size = draw(st.integers(1, 8))
        chunks.append(history[start : start + size])
        start += size
    return chunks


capacities = st.sampled_from([1, 2, 3, 1024])


def suffix_answers(index: SuffixIndex, max_len: int):
    draft, agree = index.continuation(max_len)
    assert draft.dtype == np.int32 and agree.dtype == np.float64
    return index.match(), draft.tolist(), agree.tolist()


def ngram_answers(index: NgramIndex):
    return index.match(), [index.lookup(n) for n in range(index.n_min, index.n_max + 1)]


@PROPERTY
@given(chunks=chunked_histories(), max_len=st.integers(1, 20), capacity=capacities)
def test_suffix_index_matches_brute_force(chunks, max_len, capacity):
    index = SuffixIndex(capacity=capacity)
    history: list[int] = []
    assert index.match() == (0, -1, 0)
    for chunk in chunks:
        index.extend(chunk)
        history += chunk
        assert len(index) == len(history)
        assert index.tokens.tolist() == history
        assert index.match() == ref.suffix_match(history)
        draft, agree = index.continuation(max_len)
        want_draft, want_agree = ref.suffix_continuation(history, max_len)
        assert draft.tolist() == want_draft
        np.testing.assert_allclose(agree, want_agree, rtol=0, atol=1e-12)


@PROPERTY
@given(
    chunks=chunked_histories(),
    n_range=st.tuples(st.integers(1, 8), st.integers(0, 8)),
    capacity=capacities,
)
def test_ngram_index_matches_brute_force(chunks, n_range, capacity):
    n_min, n_max = n_range[0], n_range[0] + n_range[1]
    index = NgramIndex(n_min=n_min, n_max=n_max, capacity=capacity)
    history: list[int] = []
    for chunk in chunks:
        index.extend(chunk)
        history += chunk
        assert index.tokens.tolist() == history
        assert index.match() == ref.ngram_match(history, n_min, n_max)
        for n in range(n_min, n_max + 1):
            assert index.lookup(n) == ref.ngram_lookup(history, n)


@PROPERTY
@given(junk=chunked_histories(), chunks=chunked_histories(), max_len=st.integers(1, 20))
def test_reset_and_growth_change_no_answer(junk, chunks, max_len):
    # Grown from capacity 1 and reset after unrelated tokens vs. fresh and roomy.
    grown_suffix, fresh_suffix = SuffixIndex(capacity=1), SuffixIndex(capacity=4096)
    grown_ngram, fresh_ngram = NgramIndex(1, 6, capacity=1), NgramIndex(1, 6, capacity=4096)
    for chunk in junk:
        grown_suffix.extend(chunk)
        grown_ngram.extend(chunk)
    grown_suffix.reset()
    grown_ngram.reset()
    assert len(grown_suffix) == len(grown_ngram) == 0
    assert grown_suffix.match() == (0, -1, 0) and grown_ngram.match() == (0, -1, 0)
    for chunk in chunks:
        for index in (grown_suffix, fresh_suffix, grown_ngram, fresh_ngram):
            index.extend(np.array(chunk, dtype=np.int64))
        assert suffix_answers(grown_suffix, max_len) == suffix_answers(fresh_suffix, max_len)
        assert ngram_answers(grown_ngram) == ngram_answers(fresh_ngram)


def test_large_history_finds_planted_copy_within_memory_bound():
    rng = np.random.default_rng(0)
    history = rng.integers(0, 50_000, size=100_000)
    start, copy_len = 40_000, 500
    suffix, ngram = SuffixIndex(), NgramIndex(1, 8)
    for index in (suffix, ngram):
        index.extend(history)
        index.extend(history[start : start + copy_len])
    copy_end = start + copy_len - 1

    length, end, count = suffix.match()
    # Longer than the copy only if the token before it happens to repeat too.
    assert length >= copy_len and end == copy_end and count == 1
    draft, agree = suffix.continuation(16)
    assert draft.tolist() == history[copy_end + 1 : copy_end + 17].tolist()
    assert agree.tolist() == [1.0] * 16
    assert ngram.match() == (8, copy_end, 1)

    # Bounds documented in plookup/native/suffix_automaton.py and plookup/native/ngram_hash.py; the
    # small fixed arrays (meta, per-n answers) get 1 KiB.
    tokens = len(suffix)
    capacity = suffix.tokens.base.size  # the view's base is the whole token buffer
    assert suffix.nbytes <= 140 * capacity + 1024
    assert suffix.nbytes <= 280 * tokens
    ngram_capacity = ngram.tokens.base.size
    assert ngram.nbytes <= 64 * 8 * tokens + 4 * ngram_capacity + 1024


# Random histories mixing runs longer than WALK_CAP (where COUNT/RECENT go stale),
# small-alphabet noise, large ids and replayed copies, fed in random chunks, with
# invariants that hold even when stale.
_FUZZ_SCRIPT = textwrap.dedent(
    """
    import sys
    import numpy as np
    from plookup.native.suffix_automaton import WALK_CAP
    from plookup.index.ngram import NgramIndex
    from plookup.index.suffix import SuffixIndex

    seed, histories, history_len = map(int, sys.argv[1:])
    rng = np.random.default_rng(seed)

    def check(suffix, ngram):
        tokens, n = suffix.tokens, len(suffix)
        length, end, count = suffix.match()
        assert 0 <= length < max(n, 1)
        if length:
            assert length - 1 <= end < n - 1 and count >= 1
            assert (tokens[end - length + 1 : end + 1] == tokens[n - length :]).all()
        draft, agree = suffix.continuation(16)
        assert (draft == tokens[end + 1 : end + 1 + draft.size]).all()
        assert ((agree >= 0) & (agree <= 1)).all()
        size, end, count = ngram.match()
        if size:
            assert end < n - 1 and count >= 1
            assert (tokens[end - size + 1 : end + 1] == tokens[n - size :]).all()

    for _ in range(histories):
        suffix = SuffixIndex(capacity=int(rng.integers(1, 64)))
        n_min = int(rng.integers(1, 5))
        ngram = NgramIndex(n_min, n_min + int(rng.integers(0, 8)), capacity=int(rng.integers(1, 64)))
        for after_reset in (False, True):
            while len(suffix) < history_len:
                kind = rng.integers(4)
                if kind == 0:
                    block = np.full(rng.integers(1, 3 * WALK_CAP), rng.integers(0, 3))
                elif kind == 1:
                    block = rng.integers(0, 4, size=rng.integers(1, 200))
                elif kind == 2:
                    block = rng.integers(0, 262144, size=rng.integers(1, 200))
                else:
                    start = rng.integers(0, len(suffix) + 1)
                    block = suffix.tokens[start : start + rng.integers(1, 300)].copy()
                while block.size:
                    step = int(rng.integers(1, 9)) if rng.random() < 0.9 else block.size
                    suffix.extend(block[:step])
                    ngram.extend(block[:step])
                    block = block[step:]
                    check(suffix, ngram)
            assert (suffix.tokens == ngram.tokens).all()
            suffix.reset()
            ngram.reset()
    """
)


def run_boundschecked_fuzz(tmp_path, seed: int, histories: int, history_len: int) -> None:
    env = dict(os.environ, NUMBA_BOUNDSCHECK="1", NUMBA_CACHE_DIR=str(tmp_path))
    result = subprocess.run(
        [sys.executable, "-c", _FUZZ_SCRIPT, str(seed), str(histories), str(history_len)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-4000:]


def test_boundschecked_fuzz_short(tmp_path):
    run_boundschecked_fuzz(tmp_path, seed=1, histories=4, history_len=4000)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4))
def test_boundschecked_fuzz_long(tmp_path, seed):
    run_boundschecked_fuzz(tmp_path, seed=100 + seed, histories=6, history_len=50_000)


@pytest.mark.parametrize(
    "make",
    [
        lambda: SuffixIndex(capacity=0),
        lambda: NgramIndex(capacity=0),
        lambda: NgramIndex(n_min=0),
        lambda: NgramIndex(n_min=3, n_max=2),
        lambda: NgramIndex(n_max=65),
    ],
)
def test_bad_constructor_arguments_raise(make):
    with pytest.raises(ValueError):
        make()


@pytest.mark.parametrize("index_type", [SuffixIndex, NgramIndex])
@pytest.mark.parametrize("tokens", [[1, -1], [2**31], [1.5], [[1, 2]], "ab"])
def test_bad_tokens_raise_and_append_nothing(index_type, tokens):
    index = index_type()
    index.extend([7, 7])
    with pytest.raises(ValueError):
        index.extend(tokens)
    assert index.tokens.tolist() == [7, 7]


@pytest.mark.parametrize("n", [0, 9])
def test_lookup_outside_n_range_raises(n):
    with pytest.raises(ValueError):
        NgramIndex(1, 8).lookup(n)
