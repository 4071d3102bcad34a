"""Exactness: plookup's prefill is plain decoding's, so its output is plain's wherever it drafts
nothing (any build); and where the doctor's probe finds verify batches bitwise equal to single-token
decoding (the exact build, `make EXACT=1`), the whole output is plain's, token for token, with no
near-tie allowance.

`make test` runs this file in the default build (the exact-build tests skip); `make EXACT=1
test-exact` runs it, with test_doctor.py, in a llama.cpp built without llamafile.
"""

from __future__ import annotations

import itertools
import json

import llama_cpp
import pytest

import plookup
from plookup.app.models import quantized_path
from plookup.draft.policy import CPU_COST_CURVE
from plookup.measure.costs import DEFAULT_MAX_N, curve_sizes
from plookup.measure.exactness import EXACT_MIN_ROWS, probe_invariance
from plookup.measure.settings import llamafile_in_build

from conftest import LLAMA_KWARGS, MODEL_KWARGS, kv_positions
from support.plain import PROMPTS, chat_prompt_tokens, first_divergence, greedy_with_gaps, plain_reference
from support.sampling import EagerDrafter, assert_same_distribution

MAX_TOKENS = 96
EXACT_BUILD = not llamafile_in_build()


class DecodeLog:
    """Records every llama_decode of a llama_cpp.Llama: (tokens, first position, rows with logits)."""

    def __init__(self, llm: llama_cpp.Llama):
        self.calls: list[tuple[tuple[int, ...], int, tuple[int, ...]]] = []
        decode = llm._ctx.decode

        def logged(batch):
            b = batch.batch
            self.calls.append((
                tuple(b.token[i] for i in range(b.n_tokens)), b.pos[0],
                tuple(i for i in range(b.n_tokens) if b.logits[i]),
            ))
            return decode(batch)

        llm._ctx.decode = logged


def test_prefill_makes_plain_decodings_llama_decode_calls(model_path):
    """With nothing drafted, plookup makes exactly llama_cpp's calls, over a call history that
    reuses a cached prefix, replays a fully cached prompt's last token, and extends the last
    answer; n_batch 32 splits the longer prompts into chunks."""
    kwargs = dict(LLAMA_KWARGS, n_batch=32)
    plain = llama_cpp.Llama(model_path["smollm2"], **kwargs)
    # Nothing drafted, so nothing measured: n_batch 32 is a setting of its own, whose probe and
    # curve a clean machine would measure for this test alone (11 s), and a doctor's settings would
    # load the model otherwise than `plain`.
    spec = plookup.Llama(model_path["smollm2"], max_draft=0, cost_curve=None, exactness=None, **kwargs)
    logs = DecodeLog(plain), DecodeLog(spec)
    first = "Rename `total` to `count`: def add(xs):\n    total = 0\n    for x in xs:\n        total += x\n    return total\n"

    def complete(prompt: str) -> str:
        texts = [llm.create_completion(prompt, max_tokens=12, temperature=0.0)["choices"][0]["text"] for llm in (plain, spec)]
        assert texts[0] == texts[1]
        return texts[0]

    answer = complete(first)
    complete(first)  # the whole prompt is cached: its last token is decoded again
    complete(first[:40] + " # changed")  # a cached prefix, then the rest
    complete(first + answer + "\nAnd now")  # the last prompt and its answer, extended
    assert logs[1].calls == logs[0].calls
    assert max(len(tokens) for tokens, _, _ in logs[0].calls) == 32  # the chunks were exercised
    assert spec.last_stats.forward_passes == spec.last_stats.generated == 12
    assert kv_positions(spec) == (0, spec.n_tokens - 1)


# A docstring edit and a whole function: what decides the rule is the calls plookup makes, which
# test_prefill_makes_plain_decodings_llama_decode_calls compares one by one. Both are among
# test_greedy.py's prompts on both models, which read the plain decodings made here (four prompts,
# three of them SmolLM2's alone, made this test 31-33 s of a worker).
NOTHING_DRAFTED = [w for w in PROMPTS if w.name in ("code-docstring:textwrap.indent", "code-whole:string.capwords")]


@pytest.mark.budget(30)
def test_output_equals_plain_where_nothing_is_drafted(model_path, model_pair):
    """Any build: plookup with drafting off is plain decoding, bit for bit, for the whole output."""
    name, plain, _ = model_pair
    spec = plookup.Llama(model_path[name], max_draft=0, cost_curve=None, exactness=None, **MODEL_KWARGS[name])
    assert len(NOTHING_DRAFTED) == 2  # (both names found)
    for workload in NOTHING_DRAFTED:
        prompt = chat_prompt_tokens(spec, workload.messages)
        reference, _ = plain_reference(plain, prompt, MAX_TOKENS)  # kept for test_greedy.py
        tokens = list(itertools.islice(spec.generate(prompt, temp=0.0), len(reference)))
        assert tokens == reference, f"{name} {workload.name}: differs at {first_divergence(reference, tokens)}"
        assert spec.last_stats.drafted == 0 and 0 < spec.last_stats.prefill_tokens <= len(prompt)  # prefix reuse


@pytest.fixture(scope="module")
def smollm2_q8_0(model_path):
    return str(quantized_path(model_path["smollm2"], "q8_0"))


@pytest.mark.exact_build
def test_the_probe_tells_the_builds_apart(model_path, smollm2_q8_0):
    """SmolLM2 Q4_1 (one Q8_0 tensor) and its Q8_0 requantization: not exact while llamafile's
    kernels verify the batches, bitwise exact without them."""
    for path in (model_path["smollm2"], smollm2_q8_0):
        llm = plookup.Llama(path, cost_curve=None, exactness=None, **LLAMA_KWARGS)
        verdict = probe_invariance(llm)
        singles = len(curve_sizes(DEFAULT_MAX_N)) - 1  # n = 2..17, then 24, 32, ..., 64, 65
        assert len(verdict.checks) == singles + 13 == 23 + 13  # and n = 4..16 two-branch
        assert verdict.single_invariant == EXACT_BUILD, verdict.summary()
        assert (plookup.Llama(path, cost_curve=None, **LLAMA_KWARGS).exact is True) == EXACT_BUILD


@pytest.mark.exact_build
@pytest.mark.budget(60)
def test_the_probe_runs_on_a_context_of_several_slots(model_path, tmp_path, monkeypatch):
    """Several slots have a KV stream each and no branch sequence: the probe checks single drafts
    there (a row on two streams made llama_decode fail, and the model did not load), cached apart
    from a one-slot context's verdict."""
    monkeypatch.setenv("PLOOKUP_CACHE_DIR", str(tmp_path))
    # Drafts of up to 16 tokens: the probe's 17 rows, what exactness is decided on, and the sizes
    # where a one-slot context's probe verifies two branches (4..16); all 65 rows are probed on
    # one slot by test_the_probe_tells_the_builds_apart.
    max_draft = EXACT_MIN_ROWS - 1
    spec = plookup.Llama(model_path["smollm2"], parallel=2, cost_curve=None, max_draft=max_draft,
                         **LLAMA_KWARGS)  # probes
    assert spec.kv_layout == "streams" and spec.exact is EXACT_BUILD
    [path] = (tmp_path / "invariance").glob("*-streams.json")
    checks = json.loads(path.read_text())["checks"]
    assert [c["n"] for c in checks] == curve_sizes(max_draft + 1)[1:] and not any(c["two_branch"] for c in checks)
    assert len(list(itertools.islice(spec.generate(spec.tokenize(b"Once upon a time"), temp=0.0), 8))) == 8


TOKEN_FOR_TOKEN = ["smollm2", "smollm2-q8_0"]


def share_of_prompts(which: str) -> list:
    """The prompts one quantization decodes in full: one of each kind (code-rename, code-docstring,
    code-constant, code-whole, proofread, question), the first for SmolLM2 Q4_1 and the second for
    its Q8_0, so that each meets every kind, 12 of the 24 in all. (All 24, every other prompt of a
    kind each, took 196 s of the exact leg: 117 and 79 s.)"""
    seen: dict[str, int] = {}
    share = []
    for workload in PROMPTS:
        kind = workload.name.split(":")[0]
        seen[kind] = seen.get(kind, -1) + 1
        if seen[kind] == TOKEN_FOR_TOKEN.index(which):
            share.append(workload)
    return share


@pytest.mark.exact_build
@pytest.mark.skipif(not EXACT_BUILD, reason="verify batches are exact only in the exact build (make EXACT=1)")
@pytest.mark.parametrize("which", TOKEN_FOR_TOKEN)
@pytest.mark.budget(120)
def test_exact_build_gives_plains_text_token_for_token(model_path, smollm2_q8_0, which):
    path = model_path["smollm2"] if which == "smollm2" else smollm2_q8_0
    plain = llama_cpp.Llama(path, **LLAMA_KWARGS)
    # Probed as a user's load is; drafts sized by the built-in curve, as the default legs' (what is
    # checked is exactness, whatever the drafts' sizes): on an empty cache each quantization's
    # curve made this test 148 and 65 s, against 59 and 36 with it cached.
    spec = plookup.Llama(path, cost_curve=CPU_COST_CURVE, **LLAMA_KWARGS)
    assert spec.exact
    accepted = 0
    prompts = share_of_prompts(which)
    for workload in prompts:
        prompt = chat_prompt_tokens(spec, workload.messages)
        reference, _ = greedy_with_gaps(plain, prompt, MAX_TOKENS)
        tokens = list(itertools.islice(spec.generate(prompt, temp=0.0), len(reference)))
        assert tokens == reference, f"{which} {workload.name}: differs at {first_divergence(reference, tokens)}"
        accepted += spec.last_stats.accepted
    assert len(PROMPTS) >= 24 and len(prompts) == 6 and accepted > 0  # verify batches were exercised, not skipped
    kinds = {w.name.split(":")[0] for w in PROMPTS}
    assert {w.name.split(":")[0] for w in prompts} == kinds and len(kinds) == 6


# llama_cpp's default sampler chain, every truncation on: where verify rows are plain's bit for
# bit, no token can sit on the other side of a threshold, so these must match too (test_sampling.py
# keeps the thresholds away from tokens, since the default build's rows are not plain's).
TRUNCATING = {
    "defaults": dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05),
    "min_p0.05": dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.05),
}


@pytest.mark.exact_build
@pytest.mark.skipif(not EXACT_BUILD, reason="verify batches are exact only in the exact build (make EXACT=1)")
@pytest.mark.parametrize("setting", list(TRUNCATING))
@pytest.mark.budget(60)
def test_exact_build_samples_plains_distribution_with_truncation(model_path, setting):
    plain = llama_cpp.Llama(model_path["smollm2"], **LLAMA_KWARGS)
    eager = plookup.Llama(model_path["smollm2"], drafter=EagerDrafter(), cost_curve=None, **LLAMA_KWARGS)
    assert eager.exact
    assert_same_distribution("smollm2", plain, eager, setting, TRUNCATING)


@pytest.mark.exact_build
@pytest.mark.skipif(not EXACT_BUILD, reason="verify batches are exact only in the exact build (make EXACT=1)")
@pytest.mark.budget(110)
def test_exact_build_gives_plains_text_to_concurrent_requests(model_path):
    """Four slots in the same steps: with a KV stream per slot (the layout the slot probe finds
    exact here; a unified cache interleaves their cells and is not) every request's text is its
    plain text, token for token, and each call says it is exact."""
    from concurrent.futures import ThreadPoolExecutor

    from plookup.measure.exactness import cached_slot_invariance, slots_exact

    plain = llama_cpp.Llama(model_path["smollm2"], **LLAMA_KWARGS)
    # Drafts sized by the built-in curve: what is checked is exactness, whatever the drafts' sizes,
    # and a measured 4-slot curve (up to 68 rows) is the default legs' (tests/model/test_engine.py).
    spec = plookup.Llama(model_path["smollm2"], parallel=4, cost_curve=CPU_COST_CURVE, **LLAMA_KWARGS)
    checks = cached_slot_invariance(spec)
    assert slots_exact(checks, "streams") and not slots_exact(checks, "unified")
    assert spec.exact and spec.kv_layout == "streams"
    prompts = [chat_prompt_tokens(plain, w.messages) for w in PROMPTS[:10:2] + PROMPTS[-1:]]
    references = [greedy_with_gaps(plain, p, 48)[0] for p in prompts]

    def generate(prompt):
        with spec.request() as call:
            return list(itertools.islice(spec.generate(prompt, temp=0.0), 48)), call.stats

    steps = spec._engine.step.steps
    with ThreadPoolExecutor(4) as pool:
        outputs = list(pool.map(generate, prompts))
    for workload, reference, (tokens, stats) in zip(PROMPTS, references, outputs):
        assert tokens[: len(reference)] == reference, f"differs at {first_divergence(reference, tokens)}"
        assert stats.exact is True
    assert spec._engine.step.steps - steps < sum(stats.forward_passes for _, stats in outputs)  # they shared steps
