"""The output tests' prompt set (tests/support/plain.py) mixes copy-heavy edits and free-form questions."""

from __future__ import annotations

from support.plain import PROMPTS


def test_prompt_set_is_mixed():
    kinds = [w.kind for w in PROMPTS]
    assert len(PROMPTS) >= 20 and kinds.count("copy") >= 14 and kinds.count("free") >= 6
