"""llama-server's `speculative: {n_max, n_min, p_min}` as a value: its fields checked and named."""

from __future__ import annotations

import numpy as np
import pytest

from plookup.draft.values import PLAIN, Speculative


def test_speculative_takes_llama_servers_fields_and_names_a_bad_one():
    assert Speculative.of(None) == Speculative() and Speculative.of({"n_max": 0}) == PLAIN
    assert Speculative.of({"n_max": 4, "n_min": 2, "p_min": 0.5}) == Speculative(4, 2, 0.5)
    for body, field in [({"n_max": -1}, "n_max"), ({"n_min": 1.5}, "n_min"), ({"p_min": 1.5}, "p_min"),
                        ({"n_max": True}, "n_max"), ({"draft": 3}, "draft")]:
        with pytest.raises(ValueError, match=f"speculative.{field}"):
            Speculative.of(body)
    with pytest.raises(ValueError, match="speculative must be an object"):
        Speculative.of(4)


def test_p_min_cuts_before_the_first_token_less_likely_than_it():
    p = np.array([0.9, 0.72, 0.36, 0.324])  # each token's own chance: 0.9, 0.8, 0.5, 0.9
    assert Speculative(p_min=0.5).cut(p).tolist() == p.tolist()  # 0.5 is not below 0.5
    assert Speculative(p_min=0.6).cut(p).tolist() == [0.9, 0.72]  # nor is the last token's 0.9 kept after it
    assert Speculative(p_min=0.95).cut(p).tolist() == []
    assert Speculative().cut(p) is p
    assert Speculative(p_min=0.5).cut(np.array([0.4, 0.0, 0.0])).tolist() == []  # no division by zero
