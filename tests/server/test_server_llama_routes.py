"""llama-server's own routes on `plookup serve`, driven with the bodies llama.cpp's clients send
(read from their sources: llama.vim's autoload/llama.vim, llama.vscode's src/llama-server.ts,
Continue's core/llm/llms/LlamaCpp.ts, Tabby's http-api-bindings), each answer parsed the way that
client parses it. On Qwen2.5-Coder-0.5B (a FIM model) and SmolLM2 (none).

Greedy answers are compared with plain llama_cpp decoding of the same prompt tokens, token by
token up to the first near-tie (README, "Exactness": exactly, in the exact build).
"""

from __future__ import annotations

import json
import re

import llama_cpp
import numpy as np
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

import plookup
from plookup.api.fim import fim_tokens, infill_prompt
from plookup.api.measured import NOTHING_MEASURED
from plookup.app.serve.app import create_app
from plookup.app.serve.limits import Limits
from plookup.app.serve.llama_routes import indent_cut
from plookup.draft.policy import CPU_COST_CURVE
from plookup.measure.settings import llamafile_in_build

from conftest import CODER, LLAMA_KWARGS, N_CTX
from support.plain import NEAR_TIE, first_divergence, first_near_tie, greedy_with_gaps

TIE = NEAR_TIE[CODER]
KEY = "llama-key"

# llama.cpp's own FIM test (tools/server/tests/unit/test_infill.py), as llama.vim lays out a buffer
PREFIX = '#include <cstdio>\n#include "llama.h"\n\nint main() {\n'
MIDDLE = "    int n_threads = llama_"
SUFFIX = "}\n"
EXTRA = [{"filename": "llama.h", "text": "LLAMA_API int32_t llama_n_threads();\n"}]
CODE = "def fibonacci(n):\n"  # a /completion prompt that goes on over several lines
# copied line for line, so that its lines are drafted whole (a step spans a line end)
COPIED = "a = 1\nb = 2\nc = 3\n" * 3 + "a = 1\nb = 2\n"
CHAT = "<|im_start|>user\nSay hi.<|im_end|>\n<|im_start|>assistant\n"  # answered in a few tokens, then <|im_end|>


@pytest.fixture(scope="module")
def coder_models(model_path):
    """(plain llama_cpp.Llama, plookup.Llama) on Qwen2.5-Coder-0.5B, for this module: not probed
    (as conftest.pair's), the Q8_0 requantization is (the last test)."""
    path = model_path[CODER]
    return llama_cpp.Llama(path, **LLAMA_KWARGS), plookup.Llama(path, **NOTHING_MEASURED, **LLAMA_KWARGS)


@pytest.fixture(scope="module")
def plain(coder_models):
    return coder_models[0]


@pytest.fixture(scope="module")
def coder_llm(coder_models):
    return coder_models[1]


@pytest.fixture(scope="module")
def coder(coder_llm):
    with TestClient(create_app(coder_llm, "qwen")) as client:
        yield client


@pytest.fixture(scope="module")
def smol_client(smol):
    with TestClient(create_app(smol, "smol")) as client:
        yield client


def assert_plains(plain, prompt: list[int], tokens: list[int], at_least: int = 8) -> None:
    """`tokens` are plain greedy decoding's of `prompt` up to its first near-tie (all of them
    where there is none)."""
    reference, gaps = greedy_with_gaps(plain, prompt, len(tokens), TIE)
    tie = min(first_near_tie(gaps, TIE), len(tokens))
    assert tie >= min(at_least, len(tokens)), f"only {tie} tokens before the first near-tie"
    assert tokens[:tie] == reference[:tie], f"differs at {first_divergence(reference, tokens)}, near-tie at {tie}"


def plain_text(plain, prompt: list[int], n: int) -> str:
    """The text of plain greedy decoding's first `n` tokens of `prompt`, up to its first near-tie:
    where two requests of the same prompt may round differently (the second finds it cached), both
    answers begin with it."""
    reference, gaps = greedy_with_gaps(plain, prompt, n, TIE)
    tie = first_near_tie(gaps, TIE)
    assert tie >= 4, f"only {tie} tokens before the first near-tie"
    return plain.detokenize(reference[:tie]).decode("utf-8", errors="ignore")


def prompt_tokens(llm, text: str) -> list[int]:
    return llm.tokenize(text.encode("utf-8"), add_bos=True, special=True)


def sse(response) -> list[dict]:
    """A stream's events as clients read them: every "data:" line, JSON (llama-server sends no [DONE])."""
    events = []
    for line in response.iter_lines():
        if line.startswith("data:"):
            data = line[5:].strip()
            events.append(data if data == "[DONE]" else json.loads(data))
    return events


def samples(client, headers=None) -> dict[str, float]:
    families = text_string_to_metric_families(client.get("/metrics", headers=headers).text)
    return {s.name + json.dumps(s.labels, sort_keys=True): s.value for family in families for s in family.samples}


def fim_prompt(llm, prefix=PREFIX, suffix=SUFFIX, middle=MIDDLE, extra=EXTRA, n_predict=-1) -> list[int]:
    chunks = [(e["filename"], e["text"]) for e in extra]
    return infill_prompt(llm, fim_tokens(llm), prefix, suffix, middle, chunks, n_predict, llm.n_batch)


# -- llama.vim


def test_llama_vim_warm_up_then_fim_finds_its_chunks_cached(coder, coder_llm):
    """llama.vim sends its ring buffer's chunks with n_predict 0 ahead of time; the FIM request
    that follows has them in the cache. Its answer is read as llama.vim reads it: a JSON object
    with "content" (matched by its regexes first), and the response_fields keys, "a/b" flattened."""
    chunks = [{"text": "def llama_n_threads():\n    return 8\n", "time": 1.0, "filename": "threads.py"}]
    warm_up = {"id_slot": 0, "input_prefix": "", "input_suffix": "", "input_extra": chunks, "prompt": "",
               "n_predict": 0, "temperature": 0.0, "samplers": [], "stream": False, "cache_prompt": True,
               "t_max_prompt_ms": 1, "t_max_predict_ms": 1, "response_fields": [""]}
    response = coder.post("/infill", json=warm_up)
    assert response.status_code == 200 and response.json() == {}
    fields = ["content", "timings/prompt_n", "timings/prompt_ms", "timings/prompt_per_token_ms",
              "timings/prompt_per_second", "timings/predicted_n", "timings/predicted_ms",
              "timings/predicted_per_token_ms", "timings/predicted_per_second", "truncated", "tokens_cached",
              "timings/cache_n"]
    fim = {"id_slot": 0, "input_prefix": "import os\n\n", "input_suffix": "\n", "input_extra": chunks,
           "prompt": "n = llama_", "n_predict": 128, "stop": [], "n_indent": 0, "top_k": 40, "top_p": 0.90,
           "samplers": ["top_k", "top_p", "infill"], "stream": False, "cache_prompt": True,
           "t_max_prompt_ms": 500, "t_max_predict_ms": 250, "response_fields": fields}
    response = coder.post("/infill", json=fim)
    assert response.status_code == 200
    raw = response.text
    assert re.match(r"^\s*\{", raw) and re.search(r'"content"\s*:"', raw)  # llama.vim's checks, as it writes them
    answer = json.loads(raw)
    assert sorted(answer) == sorted(fields)
    assert isinstance(answer["content"], str) and answer["truncated"] is False
    assert 1 <= answer["timings/predicted_n"] <= 128
    # The warm-up's prompt (the chunks, up to the FIM prefix token) is a prefix of this one's: cached.
    warm = fim_prompt(coder_llm, "", "", "", chunks)
    full = fim_prompt(coder_llm, "import os\n\n", "\n", "n = llama_", chunks, 128)
    common = next(i for i, (a, b) in enumerate(zip(warm, full)) if a != b)
    assert common - 1 <= answer["timings/cache_n"] <= common
    assert answer["timings/prompt_n"] == len(full) - answer["timings/cache_n"]
    # llama-server's tokens_cached (llama.vim's "c:"): what the cache holds after the answer
    assert answer["tokens_cached"] in (len(full) + answer["timings/predicted_n"] + d for d in (-1, 0))


def test_llama_vim_fim_greedy_is_plain_decoding_of_llama_servers_prompt(coder, coder_llm, plain):
    """llama.cpp's own FIM test body, greedy: the prompt is laid out as llama-server lays it
    (repo-level, the chunk under its file name) and the tokens are plain decoding's."""
    body = {"input_extra": EXTRA, "input_prefix": PREFIX, "prompt": MIDDLE, "input_suffix": SUFFIX,
            "n_predict": 24, "temperature": 0, "return_tokens": True}
    answer = coder.post("/infill", json=body).json()
    prompt = fim_prompt(coder_llm, n_predict=24)
    assert answer["prompt"] == (
        '<|repo_name|>myproject\n<|file_sep|>llama.h\nLLAMA_API int32_t llama_n_threads();\n<|file_sep|>filename\n'
        '<|fim_prefix|>#include <cstdio>\n#include "llama.h"\n\nint main() {\n    int n_threads = llama_'
        "<|fim_suffix|>}\n<|fim_middle|>"
    )
    assert answer["tokens_evaluated"] == len(prompt)
    assert answer["tokens_predicted"] == len(answer["tokens"]) == answer["timings"]["predicted_n"]
    assert_plains(plain, prompt, answer["tokens"])
    assert answer["content"] == coder_llm.detokenize(answer["tokens"]).decode()
    # llama.cpp's test asks Qwen2.5-Coder-1.5B for this answer; the 0.5B model starts it the same way
    assert answer["content"].startswith("n_threads();\n")


def test_llama_vim_instruct_warm_up_and_stream(coder):
    warm_up = {"id_slot": 1, "messages": [{"role": "user", "content": "Rename x to count:\nx = 1"}], "samplers": [],
               "n_predict": 0, "stream": False, "cache_prompt": True, "response_fields": [""]}
    response = coder.post("/v1/chat/completions", json=warm_up)
    assert response.status_code == 200 and response.json() == {}
    request = {"id_slot": 1, "messages": warm_up["messages"], "min_p": 0.1, "temperature": 0.1,
               "samplers": ["min_p", "temperature"], "stream": True, "cache_prompt": True, "max_tokens": 12}
    with coder.stream("POST", "/v1/chat/completions", json=request) as response:
        events = sse(response)
    assert events[-1] == "[DONE]"
    content = "".join(e["choices"][0]["delta"].get("content") or "" for e in events[:-1])  # as llama.vim joins it
    assert content.strip()


# -- llama.vscode


def test_llama_vscode_infill_with_n_cmpl(coder):
    """llama.vscode's completion body (createRequestPayload): n_cmpl completions, an array."""
    body = {"id_slot": 0, "input_prefix": PREFIX, "input_suffix": SUFFIX, "input_extra": EXTRA, "prompt": MIDDLE,
            "n_predict": 16, "n_cmpl": 3, "top_k": 40, "top_p": 0.99, "stream": False,
            "samplers": ["top_k", "top_p", "infill"], "cache_prompt": True, "n_indent": 4,
            "t_max_prompt_ms": 500, "t_max_predict_ms": 2500, "seed": 7}
    data = coder.post("/infill", json=body).json()
    completions = [data["content"]] if "content" in data else [c["content"] for c in data]  # getComplFromContent
    assert isinstance(data, list) and [c["index"] for c in data] == [0, 1, 2]
    assert all(isinstance(c, str) for c in completions)
    assert all(c["tokens_predicted"] <= 16 for c in data)
    # One seed for all three, as llama-server gives each: the same draw three times.
    assert completions[0] == completions[1] == completions[2]
    for text in completions:  # n_indent 4: no line after the first is indented less
        assert indent_cut(text, 4) is None


def test_llama_vscode_tokenize_and_props(coder, coder_llm):
    text = "def main():\n    print('hi')  # <|fim_prefix|>"
    answer = coder.post("/tokenize", json={"content": text, "add_special": False, "parse_special": True}).json()
    assert answer["tokens"] == coder_llm.tokenize(text.encode(), add_bos=False, special=True)
    assert fim_tokens(coder_llm).pre in answer["tokens"]  # parse_special: the marker is one token
    plain_text = coder.post("/tokenize", json={"content": text, "parse_special": False}).json()["tokens"]
    assert fim_tokens(coder_llm).pre not in plain_text
    pieces = coder.post("/tokenize", json={"content": text, "with_pieces": True}).json()["tokens"]
    assert [p["id"] for p in pieces] == answer["tokens"] and "".join(p["piece"] for p in pieces) == text
    assert coder.post("/detokenize", json={"tokens": answer["tokens"]}).json() == {"content": text}
    props = coder.get("/props").json()
    assert props["default_generation_settings"]["n_ctx"] == N_CTX  # llama.vscode's extractRuntimeContextSize
    assert props["total_slots"] == 1
    assert coder.get("/slots").json()[0]["n_ctx"] == N_CTX and coder.get("/slots").json()[0]["is_processing"] is False


def test_tokenize_pieces_that_are_not_utf8_are_bytes(coder, coder_llm):
    tokens = coder.post("/tokenize", json={"content": "媽🤗", "with_pieces": True}).json()["tokens"]
    joined = b"".join(bytes(p["piece"]) if isinstance(p["piece"], list) else p["piece"].encode() for p in tokens)
    assert joined.decode() == "媽🤗"


# -- Continue and Tabby: streamed /completion


def test_continue_streamed_completion_is_plain_decoding(coder, coder_llm, plain):
    body = {"prompt": CODE, "stream": True, "n_predict": 24, "temperature": 0, "top_k": 40, "top_p": 0.95}
    with coder.stream("POST", "/completion", json=body) as response:
        assert response.status_code == 200
        events = sse(response)
    assert "[DONE]" not in events and events[-1]["stop"] is True and all(e["stop"] is False for e in events[:-1])
    text = "".join(e["content"] for e in events if e["content"])  # Continue: yields value.content
    tokens = [t for e in events for t in e["tokens"]]
    assert text == coder_llm.detokenize(tokens).decode()
    last = events[-1]
    assert last["stop_type"] == "limit" and last["tokens_predicted"] == len(tokens) == 24
    assert last["timings"]["predicted_n"] == 24 and last["tokens_evaluated"] == len(prompt_tokens(coder_llm, CODE))
    assert_plains(plain, prompt_tokens(coder_llm, CODE), tokens)
    whole = coder.post("/completion", json=dict(body, stream=False, return_tokens=True)).json()
    assert_plains(plain, prompt_tokens(coder_llm, CODE), whole["tokens"])


def test_tabby_streamed_completion(coder, coder_llm, plain):
    """Tabby's llama.cpp binding: seed, n_predict, temperature, penalty_last_n (which llama-server
    does not read either), presence_penalty; it reads {content, stop} from each event and stops at stop."""
    body = {"seed": 0, "prompt": CODE, "n_predict": 16, "temperature": 0.0, "stream": True,
            "penalty_last_n": 0, "presence_penalty": 0.0}
    with coder.stream("POST", "/completion", json=body) as response:
        pieces = []
        for event in sse(response):
            assert isinstance(event["content"], str) and isinstance(event["stop"], bool)  # its serde struct
            pieces.append(event["content"])
            if event["stop"]:
                break
    whole = coder.post("/completions", json=dict(body, stream=False, return_tokens=True)).json()  # the alias
    assert len(whole["tokens"]) == whole["tokens_predicted"] == 16
    expected = plain_text(plain, prompt_tokens(coder_llm, CODE), 16)
    assert "".join(pieces).startswith(expected) and whole["content"].startswith(expected)


def test_tabby_suffix_on_v1_completions_is_a_fim_prompt(coder, coder_llm, plain, smol_client):
    """Tabby's OpenAI mode splits its prompt at the FIM marker and sends `suffix`: the prompt is
    /infill's (llama_cpp's own FIM prompt would carry token 0 for each FIM token)."""
    body = {"model": "qwen", "prompt": PREFIX + MIDDLE, "suffix": SUFFIX, "max_tokens": 16, "temperature": 0.0,
            "stream": True, "presence_penalty": 0.0}
    with coder.stream("POST", "/v1/completions", json=body) as response:
        text = ""
        for chunk in sse(response):
            if chunk == "[DONE]":
                break
            text += chunk["choices"][0]["text"]
            if chunk["choices"][0]["finish_reason"] is not None:
                break
    infill = coder.post("/infill", json={"input_prefix": PREFIX + MIDDLE, "input_suffix": SUFFIX, "n_predict": 16,
                                         "temperature": 0, "return_tokens": True}).json()
    prompt = fim_prompt(coder_llm, PREFIX + MIDDLE, SUFFIX, "", [], 16)
    assert infill["tokens_evaluated"] == len(prompt)
    assert_plains(plain, prompt, infill["tokens"])
    expected = plain_text(plain, prompt, 16)
    assert text.startswith(expected) and infill["content"].startswith(expected)
    response = smol_client.post("/v1/completions", json=dict(body, model="smol", stream=False))
    assert response.status_code == 400 and response.json()["error"]["param"] == "suffix"


# -- SmolLM2: no FIM tokens


def test_infill_without_fim_tokens_is_400_naming_the_model(smol_client):
    body = {"input_prefix": PREFIX, "input_suffix": SUFFIX, "prompt": MIDDLE, "n_predict": 8}
    response = smol_client.post("/infill", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "model" and error["code"] == "infill_not_supported"
    assert error["message"] == ("infill is not supported by the model smol: its vocabulary has no FIM prefix, "
                                "suffix, middle tokens")
    assert smol_client.post("/completion", json={"prompt": "1, 2, 3,", "n_predict": 4}).status_code == 200


# -- the fields the answers carry


def test_stop_words_eos_and_limits(coder):
    base = {"prompt": CODE, "n_predict": 32, "temperature": 0}
    full = coder.post("/completion", json=base).json()
    word = [line.split()[0] for line in full["content"].split("\n")[1:] if line.strip()][0]  # a later line's first
    stopped = coder.post("/completion", json=dict(base, stop=[word, "nowhere"])).json()
    assert (stopped["stop_type"], stopped["stopping_word"]) == ("word", word)
    assert stopped["content"] == full["content"][: full["content"].index(word)]
    assert (full["stop_type"], full["stopping_word"], full["tokens_predicted"]) == ("limit", "", 32)
    # the model's end of text; with ignore_eos, the answer runs on to n_predict
    ended = coder.post("/completion", json={"prompt": CHAT, "n_predict": 40, "temperature": 0}).json()
    assert (ended["stop_type"], ended["stopping_word"]) == ("eos", "") and ended["tokens_predicted"] < 40
    through = coder.post("/completion", json={"prompt": CHAT, "n_predict": ended["tokens_predicted"] + 4,
                                              "temperature": 0, "ignore_eos": True}).json()
    assert through["tokens_predicted"] == ended["tokens_predicted"] + 4 and through["stop_type"] == "limit"
    assert through["content"].startswith(ended["content"])


def test_t_max_predict_ms_ends_after_a_newline(coder):
    full = coder.post("/completion", json={"prompt": CODE, "n_predict": 120, "temperature": 0}).json()
    timed = coder.post("/completion", json={"prompt": CODE, "n_predict": 120, "temperature": 0,
                                            "t_max_predict_ms": 1}).json()
    assert timed["stop_type"] == "limit" and "\n" in timed["content"]
    assert timed["tokens_predicted"] < full["tokens_predicted"]
    assert full["content"].startswith(timed["content"])


def test_a_streamed_budget_ends_on_its_token_inside_a_drafted_step(coder):
    """The copied lines are drafted, so the step that hands out the line end the budget ends on
    hands out the next line's tokens too: they are not the completion's, streamed or not."""
    body = {"prompt": COPIED, "n_predict": 40, "temperature": 0, "t_max_predict_ms": 1}
    timed = coder.post("/completion", json=body).json()
    assert timed["content"].count("\n") == 1 and timed["content"].endswith("\n"), timed["content"]
    with coder.stream("POST", "/completion", json=dict(body, stream=True)) as response:
        events = sse(response)
    assert "".join(e["content"] for e in events) == timed["content"]
    assert sum(len(e["tokens"]) for e in events) == events[-1]["tokens_predicted"] == timed["tokens_predicted"]


def test_n_indent_cuts_the_first_line_indented_less(coder):
    """The model writes on past the function it was asked to finish; n_indent 4 ends the answer
    where a line starts less indented (the next `def`), keeping that line's indentation."""
    body = {"prompt": "def one():\n    return 1\n\n\ndef two():\n", "n_predict": 40, "temperature": 0}
    full = coder.post("/completion", json=body).json()["content"]
    cut = indent_cut(full, 4)
    assert cut is not None, full
    indented = coder.post("/completion", json=dict(body, n_indent=4)).json()
    assert indented["content"] == full[:cut] and indented["stop_type"] == "limit"
    assert indented["tokens_predicted"] < 40
    assert indent_cut("    a\n  b\n", 4) == 8 and indent_cut("    a\n\n    b", 4) is None  # the rule itself


def test_n_probs_are_the_rows_that_chose_the_tokens(coder, coder_llm, plain):
    body = {"prompt": CODE, "n_predict": 6, "temperature": 0, "n_probs": 3, "return_tokens": True}
    answer = coder.post("/completion", json=body).json()
    probs = answer["completion_probabilities"]
    assert [p["id"] for p in probs] == answer["tokens"]
    for p in probs:
        assert p["top_logprobs"][0]["id"] == p["id"] and p["logprob"] == p["top_logprobs"][0]["logprob"] <= 0
        assert len(p["top_logprobs"]) == 3 and bytes(p["bytes"]).decode("utf-8", "replace") == p["token"]
    plain.reset()
    plain.eval(prompt_tokens(coder_llm, CODE))
    row = np.ctypeslib.as_array(plain._ctx.get_logits_ith(-1), shape=(plain.n_vocab(),))
    first = llama_cpp.Llama.logits_to_logprobs(row)  # plain decoding's row for the first token
    assert probs[0]["logprob"] == pytest.approx(float(first[probs[0]["id"]]), abs=1e-3)
    with coder.stream("POST", "/completion", json=dict(body, stream=True)) as response:
        events = sse(response)
    streamed = [p for e in events[:-1] for p in e.get("completion_probabilities", [])]
    assert [p["id"] for p in streamed] == answer["tokens"]


def test_response_fields_and_timings(coder):
    fields = ["content", "generation_settings/n_predict", "timings/draft_n", "nope/x"]
    body = {"prompt": CODE, "n_predict": 8, "temperature": 0, "response_fields": fields}
    answer = coder.post("/completion", json=body).json()
    assert sorted(answer) == ["content", "generation_settings/n_predict", "timings/draft_n"]
    assert answer["generation_settings/n_predict"] == 8
    whole = coder.post("/completion", json=dict(body, response_fields=None)).json()
    timings = whole["timings"]
    assert timings["predicted_n"] == 8 and timings["prompt_n"] + timings["cache_n"] == whole["tokens_evaluated"]
    assert 0 <= timings["draft_n_accepted"] <= timings["draft_n"]


def test_json_schema_constrains_the_answer(coder):
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    body = {"prompt": "The number five as JSON: ", "n_predict": 32, "temperature": 0, "json_schema": schema}
    answer = coder.post("/completion", json=body).json()
    assert answer["stop_type"] == "eos" and isinstance(json.loads(answer["content"])["n"], int)


def test_apply_template_is_the_chat_routes_prompt(coder, coder_llm):
    from plookup.app.bench.plain import chat_prompt_tokens

    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    prompt = coder.post("/apply-template", json={"messages": messages}).json()["prompt"]
    assert prompt == coder_llm.detokenize(chat_prompt_tokens(coder_llm, messages), special=True).decode()
    assert prompt.endswith("<|im_start|>assistant\n")


def test_openai_routes_without_v1_and_include_usage(coder, coder_llm, plain):
    from plookup.app.bench.plain import chat_prompt_tokens

    assert coder.get("/models").json()["data"] == coder.get("/v1/models").json()["data"]
    messages = [{"role": "user", "content": "Write a Python function that adds two numbers."}]
    body = {"messages": messages, "max_tokens": 12, "temperature": 0}
    whole = coder.post("/chat/completions", json=body).json()
    usage_asked = dict(body, stream=True, stream_options={"include_usage": True})
    with coder.stream("POST", "/chat/completions", json=usage_asked) as response:
        events = sse(response)
    assert events[-1] == "[DONE]" and events[-2]["choices"] == [] and events[-2]["id"] == events[0]["id"]
    usage = events[-2]["usage"]
    prompt = chat_prompt_tokens(coder_llm, messages)
    assert usage["prompt_tokens"] == whole["usage"]["prompt_tokens"] == len(prompt)
    assert usage["completion_tokens"] == whole["usage"]["completion_tokens"] == 12
    assert usage["total_tokens"] == len(prompt) + 12 and usage["speculative"]["generated"] == 12
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events[:-2])
    expected = plain_text(plain, prompt, 12)
    assert text.startswith(expected) and whole["choices"][0]["message"]["content"].startswith(expected)
    plain_stream = coder.post("/v1/chat/completions", json=dict(body, stream=True))  # not asked: no usage chunk
    assert '"usage"' not in plain_stream.text


def test_llamacpp_metrics_count_what_the_answer_reports(coder):
    before = samples(coder)
    body = {"prompt": CODE + "    # compute\n", "n_predict": 16, "temperature": 0}
    answer = coder.post("/completion", json=body).json()
    after = samples(coder)

    def delta(name):
        return after[name + "{}"] - before.get(name + "{}", 0.0)

    timings = answer["timings"]
    assert delta("llamacpp:tokens_predicted_total") == 16
    assert delta("llamacpp:prompt_tokens_total") == timings["prompt_n"]
    assert delta("llamacpp:spec_decode_num_draft_tokens_total") == timings["draft_n"]
    assert delta("llamacpp:spec_decode_num_accepted_tokens_total") == timings["draft_n_accepted"]
    assert delta("llamacpp:n_decode_total") == delta("plookup_steps_total") >= 1
    assert after['plookup_requests_total{"path": "/completion", "status": "200"}'] >= 1


def test_completion_of_several_prompts_and_of_mixed_ones(coder, coder_llm, plain):
    """A list of prompts (texts or token ids) is an answer each, in a list; token ids mixed with
    texts are one prompt, the texts tokenized in place (the first with the model's BOS)."""
    ids = prompt_tokens(coder_llm, CODE)
    body = {"n_predict": 6, "temperature": 0, "return_tokens": True}
    several = coder.post("/completion", json=dict(body, prompt=[CODE, ids, "x = 1\n"])).json()
    assert isinstance(several, list) and len(several) == 3
    for answer in several[:2]:
        assert answer["tokens_evaluated"] == len(ids)
        assert_plains(plain, ids, answer["tokens"])
    assert several[2]["tokens_evaluated"] == len(prompt_tokens(coder_llm, "x = 1\n"))
    head = prompt_tokens(coder_llm, "def ")
    tail = coder_llm.tokenize(b"fibonacci(n):\n", add_bos=False, special=True)
    mixed = coder.post("/completion", json=dict(body, prompt=["def ", *tail])).json()
    assert mixed["tokens_evaluated"] == len(head) + len(tail)
    assert_plains(plain, head + tail, mixed["tokens"], at_least=4)  # this prompt meets a near-tie at 5 tokens
    assert coder.post("/completion", json=dict(body, prompt=[ids])).json()["tokens"] == several[1]["tokens"]


def test_prediction_is_drafted_on_completion_and_infill(coder, coder_llm, plain):
    """OpenAI's Predicted Outputs on llama-server's routes: the predicted text is drafted (the
    answer is not in the prompt, so without it little is) and the answer is still the model's."""
    infill = {"input_extra": EXTRA, "input_prefix": PREFIX, "prompt": MIDDLE, "input_suffix": SUFFIX}
    for route, body, prompt in (("/completion", {"prompt": CODE}, prompt_tokens(coder_llm, CODE)),
                                ("/infill", infill, fim_prompt(coder_llm, n_predict=24))):
        body = dict(body, n_predict=24, temperature=0, return_tokens=True)
        first = coder.post(route, json=body).json()
        predicted = coder.post(route, json=dict(body, prediction={"type": "content", "content": first["content"]}))
        answer = predicted.json()
        assert_plains(plain, prompt, answer["tokens"])
        assert answer["timings"]["draft_n_accepted"] >= first["timings"]["draft_n_accepted"] + 8, route


def test_generation_settings_report_the_drafts_as_served(coder, coder_llm):
    body = {"prompt": CODE, "n_predict": 4, "temperature": 0}
    settings = coder.post("/completion", json=body).json()["generation_settings"]
    assert settings["speculative"] is True and settings["speculative.n_max"] == coder_llm.max_draft > 0
    plain_answer = coder.post("/completion", json=dict(body, speculative={"n_max": 0})).json()
    assert plain_answer["generation_settings"]["speculative"] is False
    assert plain_answer["generation_settings"]["speculative.n_max"] == 0 and plain_answer["timings"]["draft_n"] == 0
    asked = {"n_max": 10**6, "n_min": 2, "p_min": 0.5}
    settings = coder.post("/completion", json=dict(body, speculative=asked)).json()["generation_settings"]
    assert [settings[f"speculative.{k}"] for k in ("n_max", "n_min", "p_min")] == [coder_llm.max_draft, 2, 0.5]


@pytest.mark.exact_build
@pytest.mark.skipif(llamafile_in_build(), reason="plain's tokens in full only where the build is exact (make EXACT=1)")
@pytest.mark.budget(90)
def test_new_routes_give_plains_tokens_in_full_where_the_build_is_exact(model_path):
    """On Qwen2.5-Coder's Q8_0 requantization (one quantization type: exact in the exact build), a
    FIM request's n_cmpl completions (the later ones find the prompt cached) and a streamed
    /completion are plain greedy decoding's tokens, every one. (In the default build the tests
    above compare the routes' tokens up to the first near-tie, and tests/model/test_exact.py checks
    the probe's verdict in each build: this test's probe of the Q8_0 model there took 22 s of the
    server leg.)"""
    from plookup.app.models import resolve_model

    path = resolve_model(f"{CODER}:q8_0")
    plain = llama_cpp.Llama(path, **LLAMA_KWARGS)
    spec = plookup.Llama(path, cost_curve=CPU_COST_CURVE, **LLAMA_KWARGS)
    assert spec.exact
    # a prefix whose lines repeat: the answer goes on with them, drafted from the prompt
    body = {"input_extra": EXTRA, "input_prefix": COPIED, "prompt": "", "input_suffix": SUFFIX,
            "n_predict": 32, "temperature": 0, "return_tokens": True}
    prompt = fim_prompt(spec, prefix=COPIED, middle="", n_predict=32)
    with TestClient(create_app(spec, "qwen-q8_0")) as client:
        answers = client.post("/infill", json=dict(body, n_cmpl=2)).json()
        with client.stream("POST", "/completion", json={"prompt": prompt, "n_predict": 32, "temperature": 0,
                                                         "stream": True}) as response:
            streamed = [t for e in sse(response) for t in e["tokens"]]
    reference, _ = greedy_with_gaps(plain, prompt, 32)
    eog = [t for t in reference if llama_cpp.llama_vocab_is_eog(spec._model.vocab, t)]
    reference = reference[: len(reference) - len(eog)]  # the answers' tokens leave the end-of-generation token out
    drafted = sum(answer["timings"]["draft_n"] for answer in answers)
    for tokens in [answer["tokens"] for answer in answers] + [streamed]:
        assert tokens == reference, f"differs at {first_divergence(reference, tokens)}"
    assert drafted > 0  # verify batches were exercised


# -- the /v1 routes serve llama-server's fields as llama-server serves them there


def test_v1_completions_take_n_probs_n_cmpl_and_return_tokens(coder, coder_llm, plain):
    ids = prompt_tokens(coder_llm, CODE)
    llama = coder.post("/completion", json={"prompt": CODE, "n_predict": 8, "temperature": 0, "n_probs": 2}).json()
    body = {"prompt": CODE, "max_tokens": 8, "temperature": 0, "n_probs": 2, "return_tokens": True, "n_cmpl": 2}
    answer = coder.post("/v1/completions", json=body).json()
    assert [c["index"] for c in answer["choices"]] == [0, 1]
    assert answer["usage"]["prompt_tokens"] == len(ids) and answer["usage"]["completion_tokens"] == 16
    for choice in answer["choices"]:
        assert len(choice["tokens"]) == 8
        assert_plains(plain, ids, choice["tokens"])
        logprobs = choice["logprobs"]
        assert len(logprobs["token_logprobs"]) == 8 and all(len(top) in (2, 3) for top in logprobs["top_logprobs"])
    first = answer["choices"][0]["logprobs"]["token_logprobs"][0]
    assert first == pytest.approx(llama["completion_probabilities"][0]["logprob"], abs=1e-3)
    messages = [{"role": "user", "content": "Say hi."}]
    chat = coder.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 4, "temperature": 0,
                                                    "n_probs": 2}).json()
    content = chat["choices"][0]["logprobs"]["content"]
    assert len(content) == 4 and all(len(t["top_logprobs"]) in (2, 3) for t in content)


def test_v1_streams_take_timings_per_token_return_tokens_and_n_indent(coder, coder_llm, plain):
    ids = prompt_tokens(coder_llm, CODE)
    body = {"prompt": CODE, "max_tokens": 8, "temperature": 0, "stream": True, "timings_per_token": True,
            "return_tokens": True}
    with coder.stream("POST", "/v1/completions", json=body) as response:
        events = sse(response)
    chunks = [e for e in events if e != "[DONE]" and e["choices"]]
    assert all("timings" in c and c["timings"]["predicted_n"] >= 0 for c in chunks)
    tokens = [t for c in chunks for t in c["choices"][0]["tokens"]]
    assert len(tokens) == 8
    assert_plains(plain, ids, tokens)
    assert "".join(c["choices"][0]["text"] for c in chunks) == coder_llm.detokenize(tokens).decode()
    # n_indent: the text ends where /completion ends it, whole or streamed
    body = {"prompt": "def one():\n    return 1\n\n\ndef two():\n", "temperature": 0, "n_indent": 4}
    cut = coder.post("/completion", json=dict(body, n_predict=40)).json()["content"]
    whole = coder.post("/v1/completions", json=dict(body, max_tokens=40)).json()["choices"][0]["text"]
    with coder.stream("POST", "/v1/completions", json=dict(body, max_tokens=40, stream=True)) as response:
        streamed = "".join(e["choices"][0]["text"] for e in sse(response) if e != "[DONE]" and e["choices"])
    assert indent_cut(cut, 4) is None and whole == streamed == cut


# -- bad bodies: 400 naming the field


@pytest.mark.parametrize("route, body, param", [
    ("/completion", {"prompt": "x", "samplers": ["top_k", "bogus"]}, "samplers"),
    ("/completion", {"prompt": "x", "samplers": "kq"}, "samplers"),
    ("/completion", {"prompt": "x", "post_sampling_probs": True, "n_probs": 2}, "post_sampling_probs"),
    ("/completion", {"prompt": "x", "n_cmpl": 0}, "n_cmpl"),
    ("/completion", {"prompt": "x", "n_cmpl": 2, "stream": True}, "n_cmpl"),
    ("/completion", {"prompt": "x", "lora": [{"id": 0, "scale": 0.5}]}, "lora"),
    ("/completion", {"prompt": ["a", "b"], "stream": True}, "prompt"),
    ("/completion", {"prompt": [[1, 2], 3]}, "prompt"),
    ("/completion", {"prompt": ["a", [1, 10**9]]}, "prompt.1"),
    ("/completion", {"prompt": []}, "prompt"),
    ("/completion", {"prompt": [1, 2, 10**9]}, "prompt"),
    ("/completion", {"prompt": "x", "n_predict": -2}, "n_predict"),
    ("/completion", {"prompt": "x", "json_schema": {"type": "nope"}, "n_predict": 2}, "json_schema"),
    ("/completion", {"prompt": "x", "logit_bias": [[1]]}, "logit_bias"),
    ("/infill", {"input_prefix": "a", "input_suffix": "b", "input_extra": [{"filename": "ok"}]}, "input_extra.0.text"),
    ("/infill", {"input_prefix": "a", "input_suffix": "b", "input_extra": [{"filename": 123, "text": "abc"}]},
     "input_extra.0.filename"),
    ("/infill", {"input_suffix": "b"}, "input_prefix"),
    ("/tokenize", {"with_pieces": True}, "content"),
    ("/detokenize", {"tokens": [-1]}, "tokens"),
    ("/apply-template", {"messages": "hi"}, "messages"),
    ("/v1/completions", {"prompt": "x", "n_cmpl": 2, "stream": True}, "n_cmpl"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "samplers": ["nope"]}, "samplers"),
])
def test_bad_bodies_are_400_naming_the_field(coder, route, body, param):
    response = coder.post(route, json=body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param, response.json()


def test_several_prompts_are_all_checked_before_any_is_generated(coder):
    """A bad second prompt is a 400 before the first is answered (it asked for no limit: it ran
    to the end of the context, a minute on the code model, then the 400 came)."""
    steps = lambda: samples(coder)["plookup_steps_total{}"]  # noqa: E731
    before = steps()
    response = coder.post("/completion", json={"prompt": ["a", [1, 10**9]]})
    assert response.status_code == 400 and response.json()["error"]["param"] == "prompt.1", response.text
    assert steps() == before


# -- the hardening covers the new routes


def test_key_and_body_limit_cover_the_new_routes(coder_llm):
    app = create_app(coder_llm, "qwen", Limits(max_body_bytes=4096), api_key=KEY)
    with TestClient(app) as client:
        for route, body in (("/completion", {"prompt": "x", "n_predict": 1}), ("/tokenize", {"content": "x"})):
            assert client.post(route, json=body).status_code == 401
            assert client.post(route, json=body, headers={"Authorization": f"Bearer {KEY}"}).status_code == 200
        assert client.get("/props").status_code == 401 and client.get("/slots").status_code == 401
        big = {"input_prefix": "x" * 5000, "input_suffix": ""}
        response = client.post("/infill", json=big, headers={"Authorization": f"Bearer {KEY}"})
        assert response.status_code == 413
        assert client.get("/health").json() == {"status": "ok"}
