"""The decoder's contract on the real model: same output as llama_cpp.Llama, clean cache, clear errors."""

from __future__ import annotations

import itertools

import llama_cpp
import pytest

import plookup
from plookup.api.measured import NOTHING_MEASURED
from plookup.draft.policy import CPU_COST_CURVE

from conftest import LLAMA_KWARGS, kv_positions
from support.plain import chat_prompt_tokens

# Plain greedy decoding of this prompt has no near-tie (top-2 logit gap < 0.3) in its first 31
# tokens on SmolLM2, so any difference in those is a bug, not llama.cpp's batched rounding; and
# the alphabet it repeats is what the drafter should guess.
COPY_PROMPT = "a b c d e f g h i j k l m n o p q r s t u v w x y z\na b c d e f g h i j k l m n o p q r s t u v w x y z\na b c d e"
MAX_TOKENS = 30


@pytest.fixture(scope="module")
def plain(model_path):
    return llama_cpp.Llama(model_path["smollm2"], **LLAMA_KWARGS)


def completion(llm, prompt=COPY_PROMPT, **kwargs):
    return llm.create_completion(prompt, **{"max_tokens": MAX_TOKENS, "temperature": 0.0, **kwargs})


def test_completion_text_equals_llama_cpp(plain, smol):
    expected = completion(plain)
    got = completion(smol)
    assert got["choices"][0]["text"] == expected["choices"][0]["text"]
    assert got["choices"][0]["finish_reason"] == expected["choices"][0]["finish_reason"]
    spec = got["usage"]["speculative"]
    assert spec == smol.last_stats.as_dict()
    assert spec["accepted"] > 0 and spec["forward_passes"] < got["usage"]["completion_tokens"]
    assert spec["accepted"] <= spec["drafted"]
    assert sum(spec["accepted_per_position"]) == spec["accepted"]
    assert sum(spec["drafted_per_position"]) == spec["drafted"]


def test_chat_completion_equals_llama_cpp(plain, smol):
    messages = [{"role": "user", "content": COPY_PROMPT}]
    expected = plain.create_chat_completion(messages, max_tokens=MAX_TOKENS, temperature=0.0)
    got = smol.create_chat_completion(messages, max_tokens=MAX_TOKENS, temperature=0.0)
    assert got["choices"][0]["message"] == expected["choices"][0]["message"]
    assert got["usage"]["speculative"]["generated"] >= got["usage"]["completion_tokens"]


def test_streaming_equals_non_streaming(smol):
    whole = completion(smol)["choices"][0]["text"]
    streamed = "".join(chunk["choices"][0]["text"] for chunk in completion(smol, stream=True))
    assert streamed == whole


def test_cache_holds_prompt_and_output_after_completion(smol):
    out = completion(smol)
    prompt = smol.tokenize(COPY_PROMPT.encode(), special=True)
    text_tokens = smol.input_ids[len(prompt) : smol.n_tokens].tolist()
    assert smol.input_ids[: len(prompt)].tolist() == prompt
    assert kv_positions(smol) == (0, smol.n_tokens - 1)
    # Everything evaluated after the prompt is output the caller received.
    assert smol.detokenize(text_tokens).decode() == out["choices"][0]["text"][: len(smol.detokenize(text_tokens).decode())]


def test_closed_generator_leaves_consistent_state(model_path, smol):
    prompt = smol.tokenize(COPY_PROMPT.encode(), special=True)
    generator = smol.generate(prompt, temp=0.0)
    first = list(itertools.islice(generator, 7))
    generator.close()
    assert kv_positions(smol) == (0, smol.n_tokens - 1)
    assert smol.input_ids[: smol.n_tokens].tolist() == (prompt + first)[: smol.n_tokens]
    fresh = plookup.Llama(model_path["smollm2"], cost_curve=CPU_COST_CURVE, **LLAMA_KWARGS)  # as `smol`
    assert completion(smol)["choices"][0]["text"] == completion(fresh)["choices"][0]["text"]


def test_max_draft_zero_is_plain_decoding(model_path, plain):
    llm = plookup.Llama(model_path["smollm2"], max_draft=0, **LLAMA_KWARGS)
    out = completion(llm)
    assert out["choices"][0]["text"] == completion(plain)["choices"][0]["text"]
    assert out["usage"]["speculative"]["drafted"] == 0
    assert out["usage"]["speculative"]["forward_passes"] == out["usage"]["completion_tokens"]


def test_generation_reaching_n_ctx_ends_with_length(model_path):
    # on a clean machine this setting's own probe and curve took 39 s
    kwargs = dict(LLAMA_KWARGS, n_ctx=64, **NOTHING_MEASURED)
    llm = plookup.Llama(model_path["smollm2"], **kwargs)
    out = llm.create_completion("one two three one two three one two three", max_tokens=0, temperature=0.0)
    assert out["choices"][0]["finish_reason"] == "length"
    assert out["usage"]["total_tokens"] <= 64
    assert kv_positions(llm)[1] < 64


@pytest.mark.parametrize("bad", [-1, 1.5, "4"])
def test_bad_max_draft(model_path, bad):
    with pytest.raises(ValueError, match="max_draft"):
        plookup.Llama(model_path["smollm2"], max_draft=bad, **LLAMA_KWARGS)


def test_draft_model_is_refused(model_path):
    with pytest.raises(ValueError, match="drafter="):
        plookup.Llama(model_path["smollm2"], draft_model=plookup.SuffixDrafter(), **LLAMA_KWARGS)


def test_missing_model_file(tmp_path):
    with pytest.raises(ValueError, match="not found"):
        plookup.Llama(str(tmp_path / "nope.gguf"), **LLAMA_KWARGS)


def test_not_a_gguf_file(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"this is not a model at all")
    with pytest.raises(ValueError, match="not a GGUF file"):
        plookup.Llama(str(path), **LLAMA_KWARGS)


def test_truncated_gguf_file(tmp_path, model_path):
    path = tmp_path / "truncated.gguf"
    with open(model_path["smollm2"], "rb") as src, open(path, "wb") as dst:
        dst.write(src.read(1 << 20))
    with pytest.raises(ValueError, match="Failed to load model"):
        plookup.Llama(str(path), **LLAMA_KWARGS)


def test_prompt_longer_than_context_leaves_model_usable(smol, plain):
    long_prompt = "word " * 3000
    with pytest.raises(ValueError, match="context window"):
        smol.create_completion(long_prompt, max_tokens=4)
    with pytest.raises(ValueError, match="context window"):
        list(smol.generate(list(range(100, 2200))))
    assert completion(smol)["choices"][0]["text"] == completion(plain)["choices"][0]["text"]


def test_empty_prompt_is_an_error(smol, plain):
    with pytest.raises(ValueError, match="empty prompt"):
        next(smol.generate([]))
    assert completion(smol)["choices"][0]["text"] == completion(plain)["choices"][0]["text"]


@pytest.mark.parametrize("grammar, reason", [
    ("root ::= undefined", "Undefined rule identifier 'undefined'"),
    ("root ::= [a-", "unexpected end of input"),
    ('start ::= "a"', "grammar does not contain a 'root' symbol"),
])
def test_a_grammar_that_does_not_parse_is_a_value_error(smol, plain, grammar, reason):
    """llama_cpp.Llama segfaults on such a grammar (it adds llama.cpp's NULL sampler to the chain)."""
    bad = llama_cpp.LlamaGrammar.from_string(grammar, verbose=False)
    with pytest.raises(ValueError, match=f"grammar: llama.cpp cannot parse it: {reason}"):
        completion(smol, grammar=bad)
    with pytest.raises(ValueError, match="grammar"):  # a Python logits processor decodes plainly
        completion(smol, grammar=bad, logits_processor=llama_cpp.LogitsProcessorList([lambda ids, row: row]))
    good = llama_cpp.LlamaGrammar.from_string('root ::= " a b c"', verbose=False)
    assert completion(smol, grammar=good)["choices"][0]["text"] == " a b c"
    assert completion(smol)["choices"][0]["text"] == completion(plain)["choices"][0]["text"]


@pytest.mark.parametrize("messages", [
    [{"role": "user", "content": "hi"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Rename `x`:\n\nx = 1\n"},
     {"role": "assistant", "content": "n = 1"}, {"role": "user", "content": "Again."}],
])
def test_chat_template_tokens_match_llama_cpp(model_pair, messages):
    # The test prompts are built as create_chat_completion prompts the model: SmolLM2 with its
    # GGUF's template, Gemma 3 with llama_cpp's "gemma" format. llama_cpp's own prompt is what it
    # evaluated before its first (here only) token.
    name, plain, _ = model_pair
    out = plain.create_chat_completion(messages, max_tokens=1, temperature=0.0)
    evaluated = plain.input_ids[: out["usage"]["prompt_tokens"]].tolist()
    assert chat_prompt_tokens(plain, messages) == evaluated, name


def test_drafts_never_reach_past_max_tokens(smol, monkeypatch):
    # A step emits its accepted drafts and one sampled token, so a draft longer than
    # max_tokens - generated - 1 verifies rows the caller never takes.
    steps = []  # (tokens generated before the step, draft length)
    propose = smol.drafter.propose

    def recorded(limit=None):
        draft = propose(limit)
        steps.append((smol.last_stats.generated, len(draft.tokens)))
        return draft

    monkeypatch.setattr(smol.drafter, "propose", recorded)
    for max_tokens in (1, 2, 6, 23):
        steps.clear()
        spec = completion(smol, max_tokens=max_tokens)["usage"]["speculative"]
        assert spec["generated"] == max_tokens
        assert all(before + n + 1 <= max_tokens for before, n in steps), (max_tokens, steps)
        if max_tokens > 2:  # the copy prompt keeps drafting, and the last draft ends on the limit
            assert steps and max(before + n + 1 for before, n in steps) == max_tokens, steps
    chat = smol.create_chat_completion([{"role": "user", "content": COPY_PROMPT}], max_tokens=7, temperature=0.0)
    assert chat["usage"]["speculative"]["generated"] == chat["usage"]["completion_tokens"] == 7
