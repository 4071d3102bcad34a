"""Drafters on empty and one-token histories, fuzzed, and the property tests recompiled with bounds checks (no model)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plookup.draft.drafters import NgramDrafter, SuffixDrafter
from plookup.index.memory import GlobalMemory


def test_drafters_on_empty_and_one_token_histories():
    memory = GlobalMemory(64)
    memory.add([5, 6, 7, 8])
    for drafter in (SuffixDrafter(), NgramDrafter(), SuffixDrafter(memory=memory)):
        for history in ([], [5], [6]):
            drafter.sync(history)
            for max_draft in (-3, 0, 1, 16):
                draft = drafter.propose(max_draft)
                assert draft.tokens.dtype == np.int32 and draft.tokens.tolist() == []
            drafter.observe(draft, 0)
            adapted = drafter(np.array(history, dtype=np.intc))
            assert adapted.dtype == np.intc and adapted.tolist() == []
            assert drafter.index.tokens.tolist() == history
        drafter.finish()


def follows_a_match(history, draft, min_match):
    """`draft` continues an earlier occurrence of the history's last `min_match` tokens."""
    suffix, n = history[-min_match:], len(history)
    return any(
        history[j - min_match + 1 : j + 1] == suffix and history[j + 1 : j + 1 + len(draft)] == draft
        for j in range(min_match - 1, n - 1)
    )


@settings(max_examples=150, deadline=None)
@given(
    kind=st.sampled_from(["suffix", "ngram"]),
    steps=st.lists(
        st.tuples(
            st.sampled_from(["sync", "extend", "propose"]),
            st.lists(st.integers(0, 3), max_size=12),
            st.integers(-2, 20),
            st.integers(0, 20),
        ),
        max_size=30,
    ),
)
def test_drafter_fuzz(kind, steps):
    drafter = SuffixDrafter() if kind == "suffix" else NgramDrafter(n_min=2, n_max=5)
    history: list[int] = []
    for op, tokens, max_draft, accepted in steps:
        if op == "sync":  # a new prompt: an extension of the history, or something else
            history = history[: max_draft % (len(history) + 1)] + tokens
            drafter.sync(history)
        elif op == "extend":
            history += tokens
            drafter.extend(tokens)
        else:
            draft = drafter.propose(max_draft)
            assert draft.tokens.dtype == np.int32 and draft.tokens.ndim == 1
            assert len(draft) <= max(max_draft, 0)
            if len(draft):
                assert len(history) > drafter.policy.min_match
                assert follows_a_match(history, draft.tokens.tolist(), drafter.policy.min_match)
            drafter.observe(draft, min(accepted, len(draft)))
        assert drafter.index.tokens.tolist() == history


@pytest.mark.slow
def test_property_tests_under_boundscheck(tmp_path):
    """The hypothesis tests of the kernels and drafters, recompiled with bounds checks."""
    tests = Path(__file__).parents[1]
    env = dict(os.environ, NUMBA_BOUNDSCHECK="1", NUMBA_CACHE_DIR=str(tmp_path))
    probe = (
        "import numpy as np; from plookup.native import suffix_automaton as sam; "
        "from plookup.index.suffix import SuffixIndex; i = SuffixIndex(capacity=1); "
        "sam.sam_extend(np.arange(3), i._tokens, i._states, i._edges, i._slots, i._meta)"
    )
    # The check is really on: writing 3 tokens into a 1-token buffer raises.
    result = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    assert result.returncode != 0 and "IndexError" in result.stderr, result.stderr[-2000:]
    # (not this test itself: its subprocess would run it again)
    selection = "(brute_force or reset_and_growth or drafter_fuzz or kernel_matches) and not under_boundscheck"
    args = [str(tests / "unit" / name) for name in ("test_kernels.py", "test_policy.py", "test_memory.py")]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", selection,
         *args, __file__],
        env=env, capture_output=True, text=True, cwd=tests.parent,
    )
    assert result.returncode == 0, result.stdout[-4000:]
    assert " passed" in result.stdout and "deselected" in result.stdout
