"""A seed fixes a sampled request's text on every repeat, whatever was drafted (plookup.api.sampling's
docstring says why): with the memory drafting a repeat from the first answer, and another request in
between. Where verify batches are exact (make EXACT=1, `Llama.exact`) the repeats draft; elsewhere a
seeded sampled request decodes without drafts, its prompt's last token alone, as a cached repeat does."""

from __future__ import annotations

import pytest

import plookup
from plookup.draft.drafters import make_drafter
from plookup.draft.policy import CPU_COST_CURVE
from plookup.index.memory import GlobalMemory
from plookup.verify import accept as accept_module

from conftest import LLAMA_KWARGS

# Copied text, so that the memory and the request's own text draft (a sampled request drafts where
# the model is sure of the next tokens: a list it has just read).
PROMPT = ("Copy the list.\nList: apple, banana, cherry, grape, lemon, mango, olive, peach, plum, quince\n"
          "Copy: apple, banana, cherry, grape, lemon, mango, olive, peach, plum, quince\nList: one, two, three, "
          "four, five, six, seven, eight, nine, ten\nCopy:")
SEED = 42


@pytest.fixture(scope="module")
def remembering(model_path):
    """SmolLM2 with a cross-request memory, as `plookup serve` drafts by default."""
    return plookup.Llama(model_path["smollm2"], cost_curve=CPU_COST_CURVE,
                         drafter=make_drafter("suffix", 16, GlobalMemory(1 << 16)), **LLAMA_KWARGS)


def seeded(llm, **extra) -> tuple[str, int]:
    """(text, draft tokens verified) of the seeded request at temperature 1."""
    result = llm.create_completion(PROMPT, max_tokens=40, temperature=1.0, seed=SEED, **extra)
    return result["choices"][0]["text"], result["usage"]["speculative"]["drafted"]


def repeats(llm, count: int = 3) -> tuple[list[str], list[int]]:
    """(texts, drafted) of `count` repeats of the seeded request, an unseeded request between each
    two, then the same request without drafts (``speculative.n_max`` 0)."""
    runs = []
    for i in range(count):
        if i:
            llm.create_completion("Say something else.", max_tokens=8, temperature=1.0)
        runs.append(seeded(llm))
    runs.append(seeded(llm, speculative={"n_max": 0}))
    return [text for text, _ in runs], [drafted for _, drafted in runs]


def test_a_seeded_request_gives_one_text_on_every_repeat(remembering):
    texts, drafted = repeats(remembering)
    assert len(texts[0]) > 20 and texts == [texts[0]] * 4
    if remembering.exact:
        assert sum(drafted[1:3]) > 0, "the repeats drafted nothing: the test would not see drafts change the text"
    else:
        assert drafted == [0, 0, 0, 0]  # not exact here: seeded sampling decodes without drafts
        unseeded = remembering.create_completion(PROMPT, max_tokens=40, temperature=1.0)
        assert unseeded["usage"]["speculative"]["drafted"] > 0  # without a seed, drafting as ever


@pytest.mark.exact_build
def test_control_a_sampler_whose_randomness_drafting_consumes_loses_the_seed(remembering, monkeypatch):
    """The control: a rule that draws a random number for every drafted row (as a sampler fed from a
    stream that drafting consumes would) gives the drafted repeat another text than the undrafted."""
    if not remembering.exact:
        pytest.skip("seeded requests draft only where verify batches are exact (make EXACT=1)")
    real = accept_module.accept

    def consuming(draft, sample, stop=None, branch=None):
        for row in range(len(draft)):
            sample(row)  # a draw for each drafted row, emitted or not
        return real(draft, sample, stop, branch)

    monkeypatch.setattr(remembering._engine.verdicts, "accept", consuming)
    texts, drafted = repeats(remembering, 2)
    assert sum(drafted[:2]) > 0 and texts[1] != texts[2]
