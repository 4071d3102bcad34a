"""Two-branch verification: the alternative-continuation kernel and the policy's decision (real
decoding where a context has two equally frequent continuations: tests/model/test_branches_greedy.py)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from plookup.draft.policy import CPU_COST_CURVE, DraftPolicy
from plookup.index.suffix import SuffixIndex

from support.reference_index import _ends_of, suffix_continuation, suffix_match


def reference_alternative(history, branch_point, max_len):
    """sam_alternative from the definitions: the context w_k's most frequent (then most recent)
    next token other than the draft's, and what followed that most recently."""
    n = len(history)
    length, end, _ = suffix_match(history)
    draft, _ = suffix_continuation(history, branch_point + 1)
    if length < 1 or max_len < 1 or len(draft) <= branch_point:
        return [], []
    context = history[end - length + 1 : end + 1] + draft[:branch_point]
    followable = len(_ends_of(history, context, n - 2))
    options = {}
    for e in _ends_of(history, context, n - 2):
        t = history[e + 1]
        if t != draft[branch_point]:
            ends = _ends_of(history, context + [t], n - 1)
            options[t] = (len(ends), max(ends))
    if not options:
        return [], []
    t = max(options, key=options.get)
    out, agree = [t], [options[t][0] / followable]
    context = context + [t]
    e = options[t][1]
    while len(out) < max_len and e + len(out) <= n - 1:
        token = history[e + len(out)]
        followable = len(_ends_of(history, context, n - 2))
        context = context + [token]
        agree.append(len(_ends_of(history, context, n - 1)) / followable)
        out.append(token)
    return out, agree


@settings(max_examples=300, deadline=None)
@given(
    history=st.lists(st.integers(0, 3), min_size=1, max_size=60),
    branch_point=st.integers(0, 6),
    max_len=st.integers(0, 8),
)
def test_alternative_kernel_matches_brute_force(history, branch_point, max_len):
    index = SuffixIndex(capacity=4)
    index.extend(history)
    tokens, agree = index.alternative(branch_point, max_len)
    ref_tokens, ref_agree = reference_alternative(history, branch_point, max_len)
    assert tokens.tolist() == ref_tokens
    np.testing.assert_allclose(agree, ref_agree)


def test_alternative_of_two_equally_frequent_continuations():
    index = SuffixIndex()
    index.extend([7, 1, 2, 3, 7, 1, 5, 6, 7, 1])  # "7 1" went on with 2 3 once and 5 6 once
    draft, agree = index.continuation(4)
    assert draft.tolist()[:2] == [5, 6] and agree[0] == 0.5
    tokens, alt_agree = index.alternative(0, 3)
    assert tokens.tolist() == [2, 3, 7] and alt_agree[0] == 0.5


def test_policy_verifies_two_branches_when_cost_is_flat_not_on_a_steep_cpu_curve():
    agree = np.ones(16)
    agree[2] = 0.5  # after two sure tokens, the context went on two ways equally often
    alt_agree = np.array([0.5] + [1.0] * 13)
    n_a, n_b = DraftPolicy(cost=np.ones(16)).choose_branches(40, agree, 2, alt_agree, 16)
    assert n_a > 2 and n_b > 0 and n_a + n_b <= 16
    assert abs((n_a - 2) - n_b) <= 1  # equally likely branches get an even split
    for steep in (np.arange(1, 17.0), CPU_COST_CURVE):  # the second branch costs more than it adds
        assert DraftPolicy(cost=steep).choose_branches(40, agree, 2, alt_agree, 16) == (0, 0)
    no_alternative = alt_agree[:0]
    assert DraftPolicy(cost=np.ones(16)).choose_branches(40, agree, 2, no_alternative, 16) == (0, 0)
