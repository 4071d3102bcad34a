"""Speculative sampling keeps the model's distribution: plookup's samples and plain llama_cpp's are
indistinguishable by a chi-squared test, while a broken acceptance rule is caught by the same test."""

from __future__ import annotations

import pytest

import plookup
from plookup.draft.policy import CPU_COST_CURVE
from plookup.verify.accept import Verdict

from conftest import CODER, LLAMA_KWARGS, MODEL_KWARGS, pair
from support.sampling import (
    N_SAMPLES,
    N_SAMPLES_CHAIN,
    PROMPT,
    SETTINGS,
    EagerDrafter,
    assert_same_distribution,
    first_tokens,
    homogeneity_p_value,
    plain_counts,
)

_eager: dict[str, plookup.Llama] = {}


@pytest.fixture(scope="module", autouse=True)
def _drop_eager_models():
    yield
    _eager.clear()


def eager(name: str, model_path) -> plookup.Llama:
    """A plookup.Llama drafting with EagerDrafter, loaded once per model for this module."""
    if name not in _eager:
        # (its drafts are not sized by a curve: none is measured)
        _eager[name] = plookup.Llama(model_path[name], drafter=EagerDrafter(), cost_curve=None, **MODEL_KWARGS[name])
    return _eager[name]


def accept_everything(draft, sample, stop=None, branch=None) -> Verdict:
    """A deliberately wrong rule with plookup.verify.accept.accept's interface: every draft token is kept,
    whatever the model samples, and one more token is sampled after them."""
    token, _ = sample(len(draft))
    return Verdict((*draft, token), stopped=False, branch_taken=False, rows=tuple(range(len(draft) + 1)))


# The acceptance rule and llama.cpp's sampler chain are the same code on every model: every setting
# runs on SmolLM2 here, and with every truncation on in the exact build (test_exact.py). The other
# models at temperature 1, the setting where most drafts are rejected, run with `make test-slow`:
# Gemma 3's 262k-vocabulary rows made its pair of tests (the distribution and the broken rule's
# control) 100 s of a test worker, two fifths of the model leg's sampling, and the code model's 90 s.
# What is Gemma's own, its sliding-window cache rolled back after rejected drafts, the greedy walks
# check in every leg (test_greedy.py).
CASES = [("smollm2", setting) for setting in SETTINGS]


@pytest.mark.parametrize("name, setting", CASES)
@pytest.mark.budget(60)
def test_distribution_of_first_tokens_matches_plain(model_path, name, setting):
    n_samples = N_SAMPLES if setting == "temp1" else N_SAMPLES_CHAIN
    assert_same_distribution(name, pair(name, model_path)[1], eager(name, model_path), setting, n_samples=n_samples)


@pytest.mark.slow
@pytest.mark.budget(150)
@pytest.mark.parametrize("name", ["gemma3", CODER])
def test_distribution_matches_plain_on_the_other_models(model_path, name):
    assert_same_distribution(name, pair(name, model_path)[1], eager(name, model_path), "temp1")


# The broken rule's sample against plain's N_SAMPLES: its distribution is so far from plain's that a
# quarter of the draws keeps the test's power at 1 on both models (computed by bootstrap from both
# samples: docs/lab/notebook.md, "CI's legs"); plain's sample is the distribution test's, drawn once.
BROKEN_SAMPLES = N_SAMPLES // 4


@pytest.mark.budget(90)
@pytest.mark.parametrize("name", ["smollm2", pytest.param("gemma3", marks=pytest.mark.slow)])
def test_broken_acceptance_rule_fails_the_same_test(model_path, name):
    plain = pair(name, model_path)[1]
    broken = plookup.Llama(model_path[name], drafter=EagerDrafter(), cost_curve=None, **MODEL_KWARGS[name])
    broken._engine.verdicts.accept = accept_everything
    expected = plain_counts(name, plain, "temp1")
    got = first_tokens(broken, range(10**6, 10**6 + BROKEN_SAMPLES), **SETTINGS["temp1"])
    assert homogeneity_p_value(expected, got) < 0.001


@pytest.mark.exact_build
def test_same_seed_same_text(model_path):
    """A seed fixes the text for a given model state: two fresh models draw the same text, and again
    the same after the same calls. One model called again starts from another state: its KV cache
    holds the prompt, so the call decodes the prompt's last token alone instead of in the prompt's
    batch (README, what carries over between calls), and in a build that is not exact for the model
    (`llm.exact` false) that rounding can move a sample: same distribution, not always the same text.
    Where the build is exact, the repeated call gives the first call's text (the exact leg runs this
    test)."""

    def sample(llm, seed=7):
        return llm.create_completion(PROMPT, max_tokens=24, temperature=0.9, seed=seed)["choices"][0]["text"]

    # (sized by the built-in curve, as `smol`: the seed's rule holds for any sizing)
    twins = [plookup.Llama(model_path["smollm2"], cost_curve=CPU_COST_CURVE, **LLAMA_KWARGS) for _ in range(2)]
    calls = [[sample(llm), sample(llm)] for llm in twins]
    assert calls[0] == calls[1]
    first, repeated = calls[0]
    # Another seed, from the same fresh state, draws another text (24 tokens of it).
    other = sample(plookup.Llama(model_path["smollm2"], cost_curve=CPU_COST_CURVE, **LLAMA_KWARGS), seed=8)
    assert len(first) >= 24 and other != first
    if twins[0].exact:
        assert repeated == first
