"""README claims on the real model (SmolLM2 Q4_1), each with the control or mutation that fails it.

Greedy outputs are compared with plain single-token decoding through llama.cpp's own sampler chain
(penalties, grammar) until the first near-tie of that chain's output (`NEAR_TIE`): before it any
difference is a bug, after it batch rounding may pick the other token (the default build). Where
the build is exact for the model (`make EXACT=1`, `.venv-exact`), the exact-build tests ask for
plain's text itself, sampled ones included.
"""

from __future__ import annotations

import ctypes
import itertools
import json

import llama_cpp
import llama_cpp._internals as internals
import numpy as np
import pytest
from fastapi.testclient import TestClient
from llama_cpp.llama_grammar import JSON_GBNF

import plookup
from plookup.api import prediction as prediction_module
from plookup.app.serve.app import create_app
from plookup.draft.policy import PRIOR_HITS, PRIOR_WEIGHT
from plookup.draft.values import NO_DRAFT, REQUEST, Draft, frozen_tokens
from plookup.measure.settings import llamafile_in_build
from plookup.verify.accept import accept

from conftest import LLAMA_KWARGS, kv_positions, pair
from support.plain import NEAR_TIE, chat_prompt_tokens, first_divergence, first_near_tie, standard_workloads
from support.prompts import COUNT_PROMPT  # no near-tie in 20 tokens

EXACT_BUILD = not llamafile_in_build()
exact_only = pytest.mark.skipif(not EXACT_BUILD, reason="plain's text itself only where the build is exact (make EXACT=1)")
TIE = NEAR_TIE["smollm2"]
WORKLOADS = {w.name: w for w in standard_workloads(seed=0)}
# A code edit whose greedy answer SmolLM2 copies with drafts accepted and rejected.
EDIT = WORKLOADS["code-constant:calendar.Calendar.monthdatescalendar"]
# Inactive under greedy (llama_cpp's chain at temperature 0 is penalties, grammar, argmax), passed
# anyway: a request sets them and must still get plain's tokens.
TRUNCATIONS = dict(top_k=20, top_p=0.9, min_p=0.1, typical_p=0.9, mirostat_mode=2, mirostat_tau=4.0)
JSON_PROMPT = 'Copy the record as JSON.\nRecord: {"name": "Alice Smith", "age": 31, "city": "Paris", "pets": ["cat", "dog"]}\nJSON: '
COPY_PROMPT = "a b c d e f g h i j k l m n o p q r s t u v w x y z\na b c d e f g h i j k l m n o p q r s t u v w x y z\na b c d e"
_TOKEN_DATA = np.dtype([("id", np.intc), ("logit", np.single), ("p", np.single)], align=True)


@pytest.fixture(scope="module")
def plain(model_path):
    return pair("smollm2", model_path)[1]


def chain_greedy(llm, prompt, n, repeat_penalty=1.0, frequency_penalty=0.0, presence_penalty=0.0, grammar=None):
    """Plain greedy decoding through llama.cpp's own penalties and grammar samplers, one token per
    llama_decode: (tokens, gap between the two best logits after the chain, at each)."""
    chain = internals.LlamaSampler()
    chain.add_penalties(llm.n_vocab(), llm.last_n_tokens_size, repeat_penalty, frequency_penalty, presence_penalty)
    if grammar is not None:
        chain.add_grammar(llm._model, grammar)
    llm.reset()
    llm.eval(list(prompt))
    n_vocab = llm.n_vocab()
    tokens, gaps = [], []
    for _ in range(n):
        data = np.zeros(n_vocab, dtype=_TOKEN_DATA)
        data["id"] = np.arange(n_vocab)
        data["logit"] = np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(n_vocab,))
        array = llama_cpp.llama_token_data_array(
            data=data.ctypes.data_as(llama_cpp.llama_token_data_p), size=n_vocab, selected=-1, sorted=False
        )
        llama_cpp.llama_sampler_apply(chain.sampler, ctypes.byref(array))
        logits = data["logit"][: array.size]
        best = int(np.argmax(logits))
        token = int(data["id"][best])
        second, first = np.partition(logits, -2)[-2:] if array.size > 1 else (-np.inf, logits[0])
        tokens.append(token)
        gaps.append(float(first - second))
        chain.accept(token)
        if llama_cpp.llama_vocab_is_eog(llm._model.vocab, token):
            break
        llm.eval([token])
    llm._requires_eval = True
    return tokens, gaps


def assert_plains_until_near_tie(reference, gaps, tokens, floor, what=""):
    tie = first_near_tie(gaps, TIE)
    assert tie >= floor, f"{what}: the first near-tie at {tie} leaves fewer than {floor} tokens to compare"
    assert tokens[:tie] == reference[:tie], f"{what}: differs at {first_divergence(reference, tokens)} before the near-tie at {tie}"


def text(result) -> str:
    choice = result["choices"][0]
    return choice["text"] if "text" in choice else choice["message"]["content"]


# -- grammars and penalties under greedy: plain's tokens until the first near-tie


SETTINGS = {
    "json_grammar": dict(grammar=True),
    # On this proofreading prompt plain's answer with either penalty leaves the one without it at
    # token 16, before its first near-tie (17).
    "frequency_penalty": dict(frequency_penalty=1.0),
    "presence_penalty": dict(presence_penalty=1.0),
    "repeat_penalty_1.1": dict(repeat_penalty=1.1),
}
PENALISED = WORKLOADS["proofread:random"]


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_greedy_with_grammar_or_penalty_is_plains_until_near_tie(plain, smol, setting):
    settings = dict(SETTINGS[setting])
    if settings.pop("grammar", False):
        prompt = smol.tokenize(JSON_PROMPT.encode())
        settings["grammar"] = llama_cpp.LlamaGrammar.from_string(JSON_GBNF, verbose=False)
    else:
        prompt = chat_prompt_tokens(smol, (EDIT if "repeat_penalty" in settings else PENALISED).messages)
    reference, gaps = chain_greedy(plain, prompt, 40, **settings)
    if "grammar" in settings:  # a fresh grammar state for each generation
        settings["grammar"] = llama_cpp.LlamaGrammar.from_string(JSON_GBNF, verbose=False)
    tokens = list(itertools.islice(smol.generate(prompt, temp=0.0, **TRUNCATIONS, **settings), len(reference)))
    assert smol.last_stats.accepted > 0  # verify batches were exercised
    assert_plains_until_near_tie(reference, gaps, tokens, 16, setting)


def test_response_format_json_object_is_plains(plain, smol):
    """create_chat_completion(response_format=json_object) builds llama_cpp's JSON grammar: the
    same text as plain's chain with that grammar until the near-tie. Unconstrained, SmolLM2
    answers this question in prose."""
    messages = [{"role": "user", "content": "Who is Alice Smith? Answer in one sentence."}]
    grammar = llama_cpp.LlamaGrammar.from_string(JSON_GBNF, verbose=False)
    reference, gaps = chain_greedy(plain, chat_prompt_tokens(smol, messages), 32, grammar=grammar)
    expected = plain.detokenize(reference[: first_near_tie(gaps, TIE)]).decode()
    assert expected.startswith("{") and len(expected) >= 16
    got = smol.create_chat_completion(messages, max_tokens=32, temperature=0.0, response_format={"type": "json_object"})
    assert text(got).startswith(expected), (text(got), expected)
    assert got["usage"]["speculative"]["accepted"] > 0


class Scripted(plookup.SuffixDrafter):
    """Drafts the reference's next two tokens, then the one after the next: the third draft token
    is rejected, and is a token the model writes two positions later, so a penalty that saw it
    would push the model off its text there."""

    def __init__(self, prompt_length: int, reference: list[int]):
        super().__init__()
        self.prompt_length, self.reference = prompt_length, reference

    def propose(self, limit=None):
        e = len(self.index) - self.prompt_length
        if (limit is not None and limit < 3) or e + 3 >= len(self.reference):
            return NO_DRAFT
        return Draft(frozen_tokens([*self.reference[e : e + 2], self.reference[e + 3]]), 8, REQUEST)


def leaky(llm):
    """plookup.verify.accept.accept, but the sampler chain also takes the rejected draft tokens: what a
    decoder that let penalties see unverified tokens would do."""

    def acceptance(draft, sample, stop=None, branch=None):
        verdict = accept(draft, sample, stop, branch)
        for token in draft[verdict.accepted :]:
            llm._engine.slots[0].generation.sampler.accept(int(token))
        return verdict

    return acceptance


# Strong enough that an extra count of a token moves the argmax wherever its margin is under 1.
PENALTY = dict(frequency_penalty=1.0)


def penalised_run(plain, smol, monkeypatch, leak):
    prompt = chat_prompt_tokens(smol, EDIT.messages)
    reference, gaps = chain_greedy(plain, prompt, 40, **PENALTY)
    monkeypatch.setattr(smol, "drafter", Scripted(len(prompt), reference))
    if leak:
        monkeypatch.setattr(smol._engine.verdicts, "accept", leaky(smol))
    tokens = list(itertools.islice(smol.generate(prompt, temp=0.0, **PENALTY), len(reference)))
    stats = smol.last_stats
    assert stats.drafted - stats.accepted >= 8  # rejected draft tokens, each the model's text 2 tokens on
    return reference, gaps, tokens


def test_penalties_see_verified_tokens_only(plain, smol, monkeypatch):
    reference, gaps, tokens = penalised_run(plain, smol, monkeypatch, leak=False)
    assert_plains_until_near_tie(reference, gaps, tokens, 30, "frequency penalty")


def test_a_penalty_that_saw_rejected_tokens_fails_the_same_check(plain, smol, monkeypatch):
    reference, gaps, tokens = penalised_run(plain, smol, monkeypatch, leak=True)
    with pytest.raises(AssertionError, match="before the near-tie"):
        assert_plains_until_near_tie(reference, gaps, tokens, 30, "leaky")


# -- sampling: where the build is exact, a seed gives plain's text with every sampler setting


SAMPLED = {
    "mirostat1": dict(mirostat_mode=1, mirostat_tau=4.0),
    "mirostat2": dict(mirostat_mode=2, mirostat_tau=4.0),
    "typical_p0.9": dict(typical_p=0.9),
    "top_k20_min_p0.1": dict(top_k=20, min_p=0.1),
    "penalties": dict(frequency_penalty=0.5, presence_penalty=0.5, repeat_penalty=1.1),
    "json_grammar": dict(grammar=True),
}


SEEDS = (7, 8, 9)


def sampled(llm, setting: str, seed: int = 7) -> dict:
    settings = dict(SAMPLED[setting])
    prompt = COPY_PROMPT
    if settings.pop("grammar", False):
        prompt, settings["grammar"] = JSON_PROMPT, llama_cpp.LlamaGrammar.from_string(JSON_GBNF, verbose=False)
    llm.reset()  # the same prefill on both: the whole prompt in one llama_decode
    return llm.create_completion(prompt, max_tokens=32, temperature=0.8, seed=seed, **settings)


@pytest.mark.exact_build
@exact_only
@pytest.mark.parametrize("setting", list(SAMPLED))
def test_exact_build_samples_plains_text_with_each_sampler(plain, smol, setting):
    """Each position is sampled once, from a row bitwise equal to plain's, by the same chain with
    the same seed: the same random draws, so the same text (mirostat's state and the penalties'
    history included)."""
    assert smol.exact
    accepted = 0
    # Several seeds: which draws a seed makes depends on the machine's rounding, and one seed's text
    # may leave the prompt at once and so never reach a verify step.
    for seed in SEEDS:
        expected = text(sampled(plain, setting, seed))
        got = sampled(smol, setting, seed)
        assert text(got) == expected, seed
        accepted += got["usage"]["speculative"]["accepted"]
    assert accepted > 0


# -- stop strings and stopping criteria on the real decoder, streamed and not


def completion(llm, stream=False, **kwargs):
    result = llm.create_completion(COPY_PROMPT, max_tokens=30, temperature=0.0, stream=stream, **kwargs)
    if not stream:
        return text(result), result["choices"][0]["finish_reason"]
    chunks = list(result)
    return "".join(c["choices"][0]["text"] for c in chunks), chunks[-1]["choices"][0]["finish_reason"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_stop_string_ends_where_plains_does_and_the_cache_holds_what_was_taken(plain, smol, stream):
    # Plain greedy decoding has no near-tie in this prompt's first 31 tokens (test_decoder.py), and
    # the drafts copy the alphabet through the stop string and beyond it.
    expected = completion(plain, stop=["k l"])
    assert expected == (" f g h i j ", "stop")
    assert completion(smol, stream, stop=["k l"]) == expected
    stats = smol.last_stats
    assert stats.accepted > 0
    # What was decoded past the stop string left the cache: it holds the prompt and the tokens
    # llama_cpp took (all but the newest, never evaluated).
    prompt = len(smol.tokenize(COPY_PROMPT.encode()))
    assert kv_positions(smol) == (0, smol.n_tokens - 1)
    assert smol.n_tokens - prompt in (stats.generated - 1, stats.generated)


def stop_after(llm, piece: str):
    """A stopping criterion on token ids only (the rows' logits differ a little in the default
    build): true once the history ends with `piece`'s token."""
    (token,) = llm.tokenize(piece.encode(), add_bos=False)
    return llama_cpp.StoppingCriteriaList([lambda ids, logits: int(ids[-1]) == token])


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_stopping_criteria_end_where_plains_do(plain, smol, stream):
    expected = completion(plain, stopping_criteria=stop_after(plain, " n"))
    assert expected[0].startswith(" f g h i j k l m n") and len(expected[0]) < 40
    assert completion(smol, stream, stopping_criteria=stop_after(smol, " n")) == expected
    assert smol.last_stats.accepted > 0  # the criterion fired inside a verified draft


# -- Python logits processors decode plainly, with a warning


def ban(llm, piece: str):
    (token,) = llm.tokenize(piece.encode(), add_bos=False)

    def processor(input_ids, scores):
        scores[token] = -np.inf
        return scores

    return llama_cpp.LogitsProcessorList([processor])


PROCESSORS = {
    "logits_processor": lambda llm: dict(logits_processor=ban(llm, " k")),
    "logit_bias": lambda llm: dict(logit_bias={llm.tokenize(b" k", add_bos=False)[0]: -100.0}),
    "min_tokens": lambda llm: dict(logits_processor=llama_cpp.LogitsProcessorList(
        [llama_cpp.MinTokensLogitsProcessor(20, llm.token_eos())])),  # llama_cpp.server's min_tokens
}


@pytest.mark.parametrize("kind", list(PROCESSORS))
def test_logits_processors_decode_plainly_with_a_warning(plain, smol, kind):
    plain.reset()
    smol.reset()  # the same prefill on both: this is plain decoding, bit for bit
    expected = completion(plain, **PROCESSORS[kind](plain))
    with pytest.warns(UserWarning, match="logits_processor given, decoding without speculation"):
        got = completion(smol, **PROCESSORS[kind](smol))
    assert got == expected
    assert smol.last_stats.drafted == 0 and smol.last_stats.generated >= 20
    if kind != "min_tokens":
        assert " k" not in got[0]  # the processor was applied


@pytest.fixture(scope="module")
def client(smol):
    with TestClient(create_app(smol, "smol")) as client:
        yield client


def events(response) -> list[dict]:
    return [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]


def test_server_min_tokens_and_logit_bias_plain_streams_without_usage(client, plain):
    body = dict(prompt=COPY_PROMPT, max_tokens=30, temperature=0)
    for extra in (dict(min_tokens=20), dict(logit_bias={str(plain.tokenize(b" k", add_bos=False)[0]): -100})):
        with pytest.warns(UserWarning, match="decoding without speculation"):
            whole = client.post("/v1/completions", json=dict(body, **extra)).json()
        assert whole["usage"]["speculative"]["drafted"] == 0
        with pytest.warns(UserWarning, match="decoding without speculation"):
            chunks = events(client.post("/v1/completions", json=dict(body, stream=True, **extra)))
        assert "".join(c["choices"][0]["text"] for c in chunks) == whole["choices"][0]["text"]
        assert chunks and not any("usage" in c for c in chunks)
    chunks = events(client.post("/v1/completions", json=dict(body, stream=True)))  # speculative
    assert len(chunks) > 1 and not any("usage" in c for c in chunks)


# -- Stream.stats and completion_tokens_details; what is set at load


COUNT_TEXT = " 13, 14, 15, 16, 17,"
PARTLY_RIGHT = " 13, 14, 15, 99, 98, 16, 17, 18"  # right, wrong, right again


def test_stream_stats_and_completion_tokens_details(smol):
    whole = smol.create_completion(COUNT_PROMPT, max_tokens=20, temperature=0.0, prediction=PARTLY_RIGHT)
    stream = smol.create_completion(COUNT_PROMPT, max_tokens=20, temperature=0.0, prediction=PARTLY_RIGHT, stream=True)
    assert isinstance(stream, plookup.Stream) and stream.stats.generated == 0
    chunks = list(stream)
    assert "".join(c["choices"][0]["text"] for c in chunks) == text(whole) == COUNT_TEXT
    assert stream.stats is smol.last_stats
    assert stream.stats.generated == whole["usage"]["completion_tokens"] == 20
    assert 0 < stream.stats.accepted <= stream.stats.drafted
    assert stream.stats.forward_passes + stream.stats.accepted == stream.stats.generated
    details = stream.completion_tokens_details()
    assert details == whole["usage"]["completion_tokens_details"]
    assert 0 < details["accepted_prediction_tokens"] and details["rejected_prediction_tokens"] > 0
    plain_stream = smol.create_completion(COUNT_PROMPT, max_tokens=20, temperature=0.0, stream=True)
    list(plain_stream)
    assert plain_stream.completion_tokens_details() is None and plain_stream.stats.generated == 20


@pytest.mark.exact_build
def test_two_branch_drafts_off_where_verification_is_exact(smol):
    assert smol.exact is EXACT_BUILD  # SmolLM2 Q4_1: exact in the exact build only (README table)
    assert smol.drafter.branches is (not smol.exact)
    completion(smol)
    if smol.exact:
        assert smol.last_stats.branch_steps == 0


def test_swa_full_false_is_overridden_with_a_warning(model_path):
    with pytest.warns(UserWarning, match="swa_full=True"):
        llm = plookup.Llama(model_path["smollm2"], swa_full=False, cost_curve=None, exactness=None, **LLAMA_KWARGS)
    assert llm.context_params.swa_full is True


def test_flash_attention_auto_is_llama_cpps_own_choice_as_llama_servers(model_path):
    """flash_attn="auto" (serve's default, llama-server's -fa auto) asks llama.cpp, which turns it on
    where the backend has the kernel, as on this CPU: the same logits as on, other than off's."""

    def last_row(flash_attn):
        llm = plookup.Llama(model_path["smollm2"], flash_attn=flash_attn, cost_curve=None, exactness=None,
                            **LLAMA_KWARGS)
        llm.eval(llm.tokenize(b"def fibonacci(n):\n    if n < 2:\n        return n\n    return"))
        return llm.context_params.flash_attn_type, np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(llm.n_vocab(),)).copy()

    (auto_type, auto), (_, on), (_, off) = last_row("auto"), last_row(True), last_row(False)
    assert auto_type == llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO
    assert np.array_equal(auto, on) and not np.array_equal(auto, off)
    with pytest.raises(ValueError, match='flash_attn must be True, False or "auto"'):
        plookup.Llama(model_path["smollm2"], flash_attn="yes", **LLAMA_KWARGS)


# -- Predicted Outputs: the accounting past the exact-matching bound; the answer with a prediction


def test_prediction_accounting_past_the_exact_bound_on_a_real_completion(smol):
    """A long prediction (the file being edited) takes the anchored path: prediction x completion
    pairs beyond EXACT_PAIRS. Here it finds what difflib's exact matching finds."""
    filler = "\nx = 1" * 14_000
    prediction = PARTLY_RIGHT + filler
    result = smol.create_completion(COUNT_PROMPT, max_tokens=20, temperature=0.0, prediction=prediction)
    assert text(result) == COUNT_TEXT
    predicted = smol.tokenize(prediction.encode(), add_bos=False)
    completed = smol.tokenize(COUNT_TEXT.encode(), add_bos=False)
    assert len(predicted) * len(completed) > prediction_module.EXACT_PAIRS
    details = result["usage"]["completion_tokens_details"]
    exact = prediction_module.prediction_usage(predicted[:64], completed)["accepted_prediction_tokens"]
    assert details == {"accepted_prediction_tokens": exact, "rejected_prediction_tokens": len(predicted) - exact}
    right_then_wrong = len(smol.tokenize(PARTLY_RIGHT.encode(), add_bos=False))
    assert 10 < exact < right_then_wrong  # the right parts counted, " 99, 98," not


REPEAT = dict(repeat_penalty=1.1)  # llama_cpp.server's default (a client that sends it)


def edit_answers(smol, prompt, n):
    prediction = smol.detokenize(smol.tokenize(EDIT.messages[-1]["content"].encode(), add_bos=False)).decode()
    answers = {}
    for name, extra in (("without", {}), ("with", dict(prediction=prediction))):
        with smol.request(**extra):
            answers[name] = list(itertools.islice(smol.generate(prompt, temp=0.0, **REPEAT), n))
    return answers


def test_repeat_penalty_with_and_without_prediction_is_plains_until_near_tie(plain, smol):
    prompt = chat_prompt_tokens(smol, EDIT.messages)
    reference, gaps = chain_greedy(plain, prompt, 40, **REPEAT)
    for name, tokens in edit_answers(smol, prompt, len(reference)).items():
        assert_plains_until_near_tie(reference, gaps, tokens, 24, f"{name} a prediction")


@pytest.mark.exact_build
@exact_only
def test_exact_build_repeat_penalty_with_and_without_prediction_is_plains_text(plain, smol):
    assert smol.exact
    prompt = chat_prompt_tokens(smol, EDIT.messages)
    plain.reset()
    reference = list(itertools.islice(plain.generate(prompt, temp=0.0, **REPEAT), 64))
    answers = edit_answers(smol, prompt, len(reference))
    assert answers["without"] == answers["with"] == reference


# -- what carries over between calls on one model


@pytest.mark.exact_build
def test_each_call_starts_from_the_prior_and_what_carries_over(smol, monkeypatch):
    """The policy's calibration is the request's own: each call's first draft is sized from the
    prior, which comes down where the earlier calls' drafts went astray (never up). What carries
    over: the cost curve, the exactness verdict, the cached prompt (KV cells), the past outcomes."""
    first_calibrations = []
    propose = smol.drafter.propose
    smol.drafter.policy.past.clear()

    def recording(limit=None):
        if len(first_calibrations) < calls:
            past_prior = smol.drafter.policy.past.prior("request", PRIOR_HITS)
            first_calibrations.append((*smol.drafter.policy.calibration(), past_prior))
        return propose(limit)

    monkeypatch.setattr(smol.drafter, "propose", recording)
    prompt = smol.tokenize(COPY_PROMPT.encode())
    cost = smol.drafter.policy.cost.copy()
    prefills = []
    for calls in (1, 2):
        list(itertools.islice(smol.generate(prompt, temp=0.0), 30))
        stats = smol.last_stats
        assert stats.accepted > 0 and smol.drafter.policy._trials.sum() > 0  # it learnt within the call
        prefills.append(stats.prefill_tokens)
    (first, _, _), (second, _, past_prior) = first_calibrations
    assert np.array_equal(first, PRIOR_HITS)  # nothing past yet
    assert np.array_equal(second, past_prior) and np.all(second <= PRIOR_HITS) and np.any(second < PRIOR_HITS)
    for _, trials, _ in first_calibrations:
        assert np.array_equal(trials, np.full_like(trials, PRIOR_WEIGHT))  # none of its own yet
    assert np.array_equal(smol.drafter.policy.cost, cost) and smol.exact is EXACT_BUILD
    assert prefills[1] == 1  # the cached prompt: only its last token decoded again
