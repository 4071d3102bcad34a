"""Greedy speculative decoding produces plain greedy decoding's tokens, on the bundled models and
on the code model (until the first near-tie: batched and single-token kernels round differently)."""

from __future__ import annotations

import itertools

import pytest

from plookup.bench.plain import NEAR_TIE, chat_prompt_tokens, first_divergence, first_near_tie, greedy_with_gaps
from plookup.bench.workloads import standard_workloads

from conftest import CODER, kv_positions

MAX_TOKENS = 96
# 14 code edits, 4 proofreading texts, 6 free-form questions.
WORKLOADS = standard_workloads(seed=0)
PROMPTS = WORKLOADS[:14] + WORKLOADS[14:18] + WORKLOADS[-6:]
# The code model decodes ~4x slower here: every third prompt (6 copy-heavy, 2 free-form). SmolLM2:
# every other one (9 copy-heavy, 3 free-form); the exact leg checks all 24 to the last token.
PROMPTS_PER_MODEL = {CODER: PROMPTS[::3], "smollm2": PROMPTS[::2]}


def test_prompt_set_is_mixed():
    kinds = [w.kind for w in PROMPTS]
    assert len(PROMPTS) >= 20 and kinds.count("copy") >= 14 and kinds.count("free") >= 6


def test_greedy_equals_plain_until_first_near_tie(any_model_pair, capsys):
    name, plain, spec = any_model_pair
    prompts = PROMPTS_PER_MODEL.get(name, PROMPTS)
    identical, accepted_on_copy, checked = 0, 0, 0
    for workload in prompts:
        prompt = chat_prompt_tokens(spec, workload.messages)
        reference, gaps = greedy_with_gaps(plain, prompt, MAX_TOKENS)
        tokens = list(itertools.islice(spec.generate(prompt, temp=0.0), len(reference)))

        tie = first_near_tie(gaps, NEAR_TIE[name])
        diverged = first_divergence(reference, tokens)
        assert tokens[:tie] == reference[:tie], (
            f"{name} {workload.name}: differs at {diverged} before the first near-tie at {tie}"
        )
        identical += tokens == reference
        if workload.kind == "copy":
            accepted_on_copy += spec.last_stats.accepted
        # The cache holds exactly prompt + output: all of it, or all but a last token that came
        # from the model rather than the draft and so was never evaluated. No rejected entries.
        assert kv_positions(spec) == (0, spec.n_tokens - 1)
        assert spec.input_ids[: spec.n_tokens].tolist() == (prompt + tokens)[: spec.n_tokens]
        assert spec.n_tokens - len(prompt) in (len(tokens) - 1, len(tokens))
        checked += min(tie, len(reference))

    with capsys.disabled():
        print(
            f"\n{name}: {identical}/{len(prompts)} prompts fully identical to plain greedy decoding; "
            f"{checked} tokens checked before first near-ties"
        )
    assert accepted_on_copy > 0, "the drafter never helped on copy-heavy prompts"
    # A 135M model meets near-ties early on some prompts; the comparison must still cover a good
    # share of the output, or this test would be checking nothing.
    assert checked >= len(prompts) * MAX_TOKENS // 8
