"""Greedy rows read as an argmax (plookup.verify.greedy) pick llama.cpp's sampler chain's tokens.

A plain-Python reference of llama.cpp's penalties sampler and greedy sampler (llama-sampler.cpp:
a candidate array of the whole vocabulary, the repeat penalty on the window's tokens, the first
largest logit) against GreedyRows on rows with ties and negative logits (on every test model:
tests/model/test_greedy_rows_models.py). Controls: a wrong argmax and a penalty left out are told
apart from the chain.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from plookup.verify.greedy import GreedyRows, greedy_rows


class Rows:
    """A context whose rows are given."""

    def __init__(self, rows: np.ndarray):
        self.rows = np.ascontiguousarray(rows, dtype=np.float32)
        self.ctx = None


class GivenRows(GreedyRows):
    """GreedyRows reading a :class:`Rows` (the real one reads llama.cpp's logits buffer)."""

    def row(self, ctx, i):
        return ctx.rows[i]


def chain_reference(rows: np.ndarray, penalty: float, last_n: int) -> list[int]:
    """llama.cpp's penalties then greedy sampler on each row in turn, accepting each token."""
    window: list[int] = []
    out = []
    for row in rows:
        candidates = [(token, np.float32(logit)) for token, logit in enumerate(row)]
        counts = {t: window.count(t) for t in set(window)}
        if last_n > 0 and np.float32(penalty) != np.float32(1.0):
            for k, (token, logit) in enumerate(candidates):
                if counts.get(token, 0) > 0:
                    p = np.float32(penalty)
                    candidates[k] = (token, logit * p if logit <= 0 else logit / p)
        selected = 0
        for k in range(1, len(candidates)):
            if candidates[k][1] > candidates[selected][1]:
                selected = k
        token = candidates[selected][0]
        out.append(token)
        if last_n > 0:
            window = (window + [token])[-last_n:]
    return out


def argmax_tokens(rows: np.ndarray, penalty: float, last_n: int, sampler_type=None) -> list[int]:
    sampler_type = sampler_type or GivenRows
    sampler, ctx = sampler_type(rows.shape[1], penalty, last_n), Rows(rows)
    return [sampler.sample(ctx, i) for i in range(len(rows))]


# Few distinct logits, so that ties and the repeat penalty's sign rule matter.
logits = st.sampled_from([-3.0, -1.5, -0.5, 0.0, 0.5, 1.25, 2.0, 2.5])
cases = st.tuples(
    st.integers(2, 12).flatmap(lambda v: st.lists(st.lists(logits, min_size=v, max_size=v), min_size=1, max_size=24)),
    st.sampled_from([1.0, 1.1, 1.3, 0.8, 2.0]),
    st.integers(0, 6),
)


@settings(max_examples=300, deadline=None)
@given(cases)
def test_argmax_rows_equal_the_chain_reference(case):
    rows, penalty, last_n = case
    rows = np.array(rows, dtype=np.float32)
    assert argmax_tokens(rows, penalty, last_n) == chain_reference(rows, penalty, last_n)


class NoPenalty(GivenRows):
    """A broken GreedyRows that ignores the repeat penalty."""

    def __init__(self, n_vocab, repeat_penalty=1.0, last_n=0):
        super().__init__(n_vocab, 1.0, 0)


class LastMaximum(GivenRows):
    """A broken argmax: the last largest logit, not the first."""

    def sample(self, ctx, i):
        return int(self.n_vocab - 1 - self.row(ctx, i)[::-1].argmax())


def test_the_reference_tells_a_broken_argmax_apart():
    rows = np.array([[2.0, 1.9, 0.5], [2.0, 1.9, 0.5], [1.0, 1.0, -1.0]], dtype=np.float32)
    assert chain_reference(rows, 1.3, 4) == [0, 1, 0]  # the penalty moves the second row to token 1
    assert argmax_tokens(rows, 1.3, 4) == [0, 1, 0]
    assert argmax_tokens(rows, 1.3, 4, NoPenalty) == [0, 0, 0]
    assert argmax_tokens(rows, 1.0, 0, LastMaximum) != chain_reference(rows, 1.0, 0)


def test_the_row_is_left_as_llama_cpp_wrote_it():
    rows = np.array([[3.0, -2.0, 1.0], [3.0, -2.0, 1.0]], dtype=np.float32)
    ctx, sampler = Rows(rows), GivenRows(3, 1.5, 8)
    sampler.sample(ctx, 0)
    sampler.sample(ctx, 1)
    assert ctx.rows.tolist() == rows.tolist()


def test_only_plain_greedy_chains_are_read_as_an_argmax():
    base = dict(temp=0.0, grammar=None, repeat_penalty=1.1, frequency_penalty=0.0, presence_penalty=0.0)
    assert isinstance(greedy_rows(10, 64, **base), GreedyRows)
    for change in (dict(temp=0.7), dict(temp=-1.0), dict(grammar=object()), dict(frequency_penalty=0.1),
                   dict(presence_penalty=0.2)):
        assert greedy_rows(10, 64, **{**base, **change}) is None
