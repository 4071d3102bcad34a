"""Six editors' requests on their defaults, sent to `plookup serve`'s app as the editors send them,
each answer parsed the way that editor parses it.

Every body below is copied from the editor's own source (repository, path and the commit read are
named above it): its exact field set on the editor's default settings, with small code files for
text so that each test stays fast on a 2-core CPU. Where an editor's default lets the model
generate hundreds of tokens and the editor's setting for it is configurable, the length is capped
and the comment says so; where it is not configurable (llama.vim's and llama.vscode's chat
requests, Zed's llama.cpp provider), the body is left as sent and its prompt asks for a short
answer (the app runs with a server-wide bound, SERVER_N_PREDICT, as `plookup serve -n` sets one).

The app serves one model whatever `model` a body names (as llama-server does): its OpenAI-style
answers carry the served id, which the tests check wherever a client gets one.

Sources (the snapshot each was read at):
  ggml-org/llama.vim       a1c8e6e40cb45df59b78add5b65d575386832465  autoload/llama.vim
  ggml-org/llama.vscode    3938fb3568b98e3ddfcf2ce3dd52d9570552b579  src/llama-server.ts, src/completion.ts,
                           src/statusbar.ts, src/extra-context.ts, src/prompts.ts, package.json
  continuedev/continue     d0a3c0b626b5bebc3bef4742eec05a0242be0bab  core/llm/llms/LlamaCpp.ts,
                           core/llm/llms/OpenAI.ts, core/llm/index.ts, core/llm/openaiTypeConverters.ts,
                           core/llm/templates/chat.ts, core/autocomplete/..., packages/openai-adapters/src/apis/OpenAI.ts,
                           packages/fetch/src/stream.ts
  TabbyML/tabby            21b29048d7bcf6b94f9f482f2d0fd05efadfd19f  crates/http-api-bindings/src/completion/{llama,openai,mod}.rs,
                           crates/tabby-inference/src/{code,completion}.rs, crates/tabby-common/src/config.rs
  twinnydotdev/twinny      193d14c0db4645d6483a38926fc997f9d07fe9ff  src/extension/provider-options.ts,
                           src/extension/llm.ts, src/extension/utils.ts, src/extension/fim-templates.ts,
                           src/extension/providers/completion.ts, package.json, docs/providers.md
  zed-industries/zed       (stored versions)  crates/language_models/src/provider/open_ai_compatible.rs,
                           crates/open_ai/src/completion.rs (into_open_ai), crates/open_ai/src/open_ai.rs
                           (Request, StreamOptions, stream_completion); its llama.cpp provider:
                           crates/language_models/src/provider/llama_cpp.rs, crates/llama_cpp/src/llama_cpp.rs
"""

from __future__ import annotations

import json
import re

import pytest
from fastapi.testclient import TestClient

import plookup
from plookup.api.measured import NOTHING_MEASURED
from plookup.app.serve.app import create_app
from plookup.app.serve.limits import Limits

from conftest import CODER, LLAMA_KWARGS, N_CTX

SERVED = "qwen"  # the id the app serves its one model as (`plookup serve --model-alias`)
CAP = 48  # the length cap where an editor's default is long and its setting configurable
# The server's own bound (`plookup serve -n 256`, llama-server's -n): a body whose length field the
# app does not honour runs to it, not to the context, and fails its check in seconds; every
# length an editor sends below is under it.
SERVER_N_PREDICT = 256

# A small Python project the editors' requests are cut from.
GEOMETRY = [  # geometry.py, the file being edited
    "import math",
    "",
    "",
    "def area(radius):",
    "    return math.pi * radius ** 2",
    "",
    "",
    "def circumference(radius):",
    "    return ",
    "",
    "",
    "def describe(radius):",
    '    return f"r={radius} a={area(radius):.2f}"',
]
CURSOR_LINE = 9  # 1-based: "    return ", the cursor at its end
SHAPES = [  # shapes.py, another file open in the editor (the ring buffer's / snippets' source)
    "from geometry import area",
    "",
    "",
    "class Circle:",
    "    def __init__(self, radius):",
    "        self.radius = radius",
    "",
    "    def area(self):",
    "        return area(self.radius)",
]
PREFIX = "\n".join(GEOMETRY[: CURSOR_LINE - 1]) + "\n" + GEOMETRY[CURSOR_LINE - 1]
SUFFIX = "\n" + "\n".join(GEOMETRY[CURSOR_LINE:]) + "\n"


@pytest.fixture(scope="module")
def coder(model_path):
    llm = plookup.Llama(model_path[CODER], **NOTHING_MEASURED, **LLAMA_KWARGS)  # not probed, as conftest.pair's
    with TestClient(create_app(llm, SERVED, Limits(n_predict=SERVER_N_PREDICT))) as client:
        yield client


def ok(response):
    assert response.status_code == 200, f"{response.status_code}: {response.text[:2000]}"
    return response


# -- how the clients read a stream


def data_payloads(text: str, prefixes=("data: ", "data:")) -> list[str]:
    """The payload of every "data:" line, in order (blank lines, comments and pings skipped)."""
    out = []
    for line in text.splitlines():
        for prefix in prefixes:
            if line.startswith(prefix):
                out.append(line[len(prefix):])
                break
    return out


def event_source_messages(text: str) -> list[str]:
    """Server-sent events as an EventSource reads them (Tabby's reqwest_eventsource): an event's
    data lines (one leading space cut) joined by newlines, an event ended by a blank line."""
    messages, data = [], []
    for line in text.split("\n"):
        line = line.rstrip("\r")
        if line == "":
            if data:
                messages.append("\n".join(data))
            data = []
        elif line.startswith(":"):
            continue
        elif line.startswith("data"):
            value = line[5:] if line.startswith("data:") else ""
            data.append(value[1:] if value.startswith(" ") else value)
    if data:
        messages.append("\n".join(data))
    return messages


def continue_stream_sse(text: str) -> list[dict]:
    """Continue's streamSse (packages/fetch/src/stream.ts): "data:[DONE]" / "data: [DONE]" or ": ping"
    ends the lines read, a "data:" line's JSON is yielded (an "error" in it, or JSON that does not
    parse, throws)."""
    values = []
    for line in text.split("\n"):
        if line.startswith("data:[DONE]") or line.startswith("data: [DONE]") or line.startswith(": ping"):
            break
        if line.startswith("data:"):
            payload = line[len("data: "):] if line.startswith("data: ") else line[len("data:"):]
            value = json.loads(payload)  # "Malformed JSON sent from server" otherwise
            assert not value.get("error"), f"Error streaming response: {value['error']}"
            values.append(value)
    return values


def openai_sdk_stream(text: str) -> list[dict]:
    """The openai SDK's stream (Continue's OpenAI provider): events up to "[DONE]", each JSON; an
    event carrying "error" raises."""
    chunks = []
    for payload in data_payloads(text):
        if payload.startswith("[DONE]"):
            break
        chunk = json.loads(payload)
        assert chunk.get("error") is None, chunk
        chunks.append(chunk)
    return chunks


def assert_served(chunks: list[dict]) -> None:
    assert chunks and all(c["model"] == SERVED for c in chunks), [c.get("model") for c in chunks]


# == llama.vim (ggml-org/llama.vim, autoload/llama.vim) ===========================================
# Defaults (s:default_config): endpoint_fim http://127.0.0.1:8012/infill, endpoint_inst
# .../v1/chat/completions, model_fim '' and model_inst '', n_prefix 256, n_suffix 64, n_predict 128,
# stop_strings [], t_max_prompt_ms 500, t_max_predict_ms 1000, ring_chunk_size 64.
# `if exists("g:llama_config.model_fim") && len("g:llama_config.model_fim") > 0` measures the
# string literal, so "model" is always sent: "" on the defaults.


def vim_fim_ctx(lines: list[str], pos_y: int, pos_x: int, prev: list[str], indent_last: int = 0,
                n_prefix: int = 256, n_suffix: int = 64) -> dict:
    """s:fim_ctx_local: the text around the cursor (pos_y 1-based, pos_x 0-based), as if `prev`
    (a suggestion's lines) were already inserted."""
    def getline(a: int, b: int) -> list[str]:  # Vim's getline(a, b), 1-based, inclusive
        return lines[max(a, 1) - 1: b] if b >= a else []

    max_y = len(lines)
    if not prev:
        line_cur = lines[pos_y - 1]
        line_cur_prefix, line_cur_suffix = line_cur[:pos_x], line_cur[pos_x:]
        lines_prefix = getline(max(1, pos_y - n_prefix), pos_y - 1)
        lines_suffix = getline(pos_y + 1, min(max_y, pos_y + n_suffix))
        if re.match(r"^\s*$", line_cur):
            indent, line_cur_prefix, line_cur_suffix = 0, "", ""
        else:
            indent = len(re.match(r"^\s*", line_cur).group(0))
    else:
        line_cur = lines[pos_y - 1] + prev[0] if len(prev) == 1 else prev[-1]
        line_cur_prefix, line_cur_suffix = line_cur, ""
        lines_prefix = getline(max(1, pos_y - n_prefix + len(prev) - 1), pos_y - 1)
        if len(prev) > 1:
            lines_prefix = lines_prefix + [lines[pos_y - 1] + prev[0]] + prev[1:-1]
        lines_suffix = getline(pos_y + 1, min(max_y, pos_y + n_suffix))
        indent = indent_last
    return {
        "prefix": "\n".join(lines_prefix) + "\n",
        "middle": line_cur_prefix,
        "suffix": line_cur_suffix + "\n" + "\n".join(lines_suffix) + "\n",
        "indent": indent,
    }


# s:ring_get_extra: {'text': chunk.str, 'time': reltime(), 'filename': expand('%')}; reltime() is a
# [seconds, microseconds] list in Vim and Neovim, and json_encode sends it as one.
VIM_RING = [{"text": "\n".join(SHAPES[3:9]) + "\n", "time": [1718031337, 271828], "filename": "shapes.py"}]

VIM_FIM_FIELDS = [
    "content", "timings/prompt_n", "timings/prompt_ms", "timings/prompt_per_token_ms", "timings/prompt_per_second",
    "timings/predicted_n", "timings/predicted_ms", "timings/predicted_per_token_ms", "timings/predicted_per_second",
    "truncated", "tokens_cached",
]


def vim_fim_body(ctx: dict, t_max_predict_ms: int) -> dict:
    # llama#fim: the FIM request ('model' added after the dict, as llama.vim adds it)
    return {
        "id_slot": 0,
        "input_prefix": ctx["prefix"],
        "input_suffix": ctx["suffix"],
        "input_extra": VIM_RING,
        "prompt": ctx["middle"],
        "n_predict": 128,  # g:llama_config.n_predict (t_max_predict_ms ends it sooner, after a newline)
        "stop": [],
        "n_indent": ctx["indent"],
        "top_k": 40,
        "top_p": 0.90,
        "samplers": ["top_k", "top_p", "infill"],
        "stream": False,
        "cache_prompt": True,
        "t_max_prompt_ms": 500,
        "t_max_predict_ms": t_max_predict_ms,  # 250 on the first request, g:llama_config's 1000 on a speculative one
        "response_fields": VIM_FIM_FIELDS,
        "model": "",
    }


def vim_fim_response(raw: str) -> dict:
    """s:fim_on_response and s:fim_render: the raw answer passes llama.vim's fast checks (else it is
    dropped without a word), is json_decode'd, and its flattened fields are read with get()."""
    assert re.search(r"^\s*\{", raw), raw[:200]
    assert re.search(r'"content"\s*:"', raw), f"llama.vim drops an answer not matching \\v\"content\"\\s*:\": {raw[:300]}"
    answer = json.loads(raw)
    # response_fields: llama-server answers with the fields asked for, flattened, and only those
    assert sorted(answer) == sorted(VIM_FIM_FIELDS), sorted(set(answer) ^ set(VIM_FIM_FIELDS))
    assert isinstance(answer["content"], str)
    for key in ("timings/prompt_n", "timings/prompt_ms", "timings/prompt_per_second",  # its has_key() checks
                "timings/predicted_n", "timings/predicted_ms", "timings/predicted_per_second"):
        assert isinstance(answer[key], (int, float)) and not isinstance(answer[key], bool), (key, answer[key])
    assert type(answer["tokens_cached"]) is int  # the "c:" of its info line
    assert type(answer["truncated"]) is bool
    return answer


def test_llama_vim_ring_warm_up_fim_and_speculative_fim(coder):
    # s:ring_update: a queued chunk moves to the ring and is sent ahead of the next FIM
    # ("no samplers needed here"; no callbacks: the answer is not read)
    warm_up = {
        "id_slot": 0,
        "input_prefix": "",
        "input_suffix": "",
        "input_extra": VIM_RING,
        "prompt": "",
        "n_predict": 0,
        "temperature": 0.0,
        "samplers": [],
        "stream": False,
        "cache_prompt": True,
        "t_max_prompt_ms": 1,
        "t_max_predict_ms": 1,
        "response_fields": [""],
        "model": "",
    }
    ok(coder.post("/infill", json=warm_up))

    # llama#fim at the end of "    return " (pos_x = col('.') - 1)
    ctx = vim_fim_ctx(GEOMETRY, CURSOR_LINE, len(GEOMETRY[CURSOR_LINE - 1]), [])
    assert ctx["indent"] == 4 and ctx["middle"] == "    return "
    answer = vim_fim_response(ok(coder.post("/infill", json=vim_fim_body(ctx, 250))).text)
    assert 1 <= answer["timings/predicted_n"] <= 128
    assert answer["tokens_cached"] >= answer["timings/predicted_n"]

    # s:fim_render splits the content into lines, drops trailing empty ones, and s:fim_try_hint then
    # runs llama#fim(..., prev=content) for the text as if the suggestion were accepted
    content = answer["content"].split("\n")
    while content and content[-1] == "":
        content.pop()
    prev = content or [""]
    speculative = vim_fim_ctx(GEOMETRY, CURSOR_LINE, len(GEOMETRY[CURSOR_LINE - 1]), prev, indent_last=ctx["indent"])
    again = vim_fim_response(ok(coder.post("/infill", json=vim_fim_body(speculative, 1000))).text)
    assert 0 <= again["timings/predicted_n"] <= 128


def test_llama_vim_instruct_warm_up_and_stream(coder):
    # llama#inst_build, on a selection of line 9 of geometry.py with an empty ring buffer
    system = (
        "You are a text-editing assistant. Respond ONLY with the result of applying INSTRUCTION to SELECTION given "
        "the CONTEXT. Maintain the existing text indentation. Do not add extra code blocks. Respond only with the "
        "modified block. If the INSTRUCTION is a question, answer it directly. Do not output any extra separators. "
        "Consider the local context before (PREFIX) and after (SUFFIX) the SELECTION.\n"
        "\n"
        "--- CONTEXT     " + "-" * 40 + "\n" + "\n"
        "--- PREFIX      " + "-" * 40 + "\n" + "\n".join(GEOMETRY[: CURSOR_LINE - 1]) + "\n"
        "--- SELECTION   " + "-" * 40 + "\n" + "    return 2 * math.pi * radius\n"
        "--- SUFFIX      " + "-" * 40 + "\n" + "\n".join(GEOMETRY[CURSOR_LINE:]) + "\n"
    )
    # llama#inst: while the user types the instruction, a warm-up with an empty INSTRUCTION
    warm_messages = [{"role": "system", "content": system}, {"role": "user", "content": ""}]
    warm_up = {
        "id_slot": 0,  # s:inst_req_id, from 0
        "messages": warm_messages,
        "samplers": [],
        "n_predict": 0,
        "stream": False,
        "cache_prompt": True,
        "response_fields": [""],
        "model": "",
    }
    ok(coder.post("/v1/chat/completions", json=warm_up))

    # llama#inst_send: no n_predict (not configurable), so the answer runs to the model's end
    messages = [{"role": "system", "content": system},
                {"role": "user", "content": "INSTRUCTION: rename radius to r"}]
    request = {
        "id_slot": 0,
        "messages": messages,
        "min_p": 0.1,
        "temperature": 0.1,
        "samplers": ["min_p", "temperature"],
        "stream": True,
        "cache_prompt": True,
        "model": "",
    }
    raw = ok(coder.post("/v1/chat/completions", json=request)).text
    # s:inst_on_response: every line, "data: " cut, json_decode'd (a line that fails is skipped),
    # choices[0].delta.content appended where it is a string
    content, chunks = "", []
    for line in raw.splitlines():
        if len(line) > 5 and line[:6] == "data: ":
            line = line[6:]
        if not line.strip():
            continue
        try:
            response = json.loads(line)
            choices = response.get("choices", [{}])
            chunks.append(response)
            if "delta" in choices[0]:
                delta = choices[0]["delta"].get("content")
                if isinstance(delta, str):
                    content += delta
            elif "message" in choices[0]:
                content += choices[0]["message"]["content"]
        except (ValueError, IndexError, AttributeError):
            continue
    assert content.strip(), raw[:1000]
    assert_served(chunks)


# == llama.vscode (ggml-org/llama.vscode, src/llama-server.ts) =====================================
# Defaults (package.json): n_prefix 256, n_suffix 64, n_predict 128, t_max_prompt_ms 500,
# t_max_predict_ms 500, max_parallel_completions 3, lora_completion "", ai_api_version "v1",
# ai_model "google/gemini-2.5-flash" (sent as "model" by the FIM and chat bodies, from the plain
# `endpoint` setting). extra-context.ts: a chunk is {text: lines.join('\n') + '\n', time: Date.now(),
# filename: doc.fileName}.
VSCODE_CHUNKS = [{"text": "\n".join(SHAPES[3:9]) + "\n", "time": 1718031337271,
                  "filename": "/home/dev/project/shapes.py"}]
VSCODE_MODEL = "google/gemini-2.5-flash"


def test_llama_vscode_prepare_and_fim(coder):
    # updateExtraContext -> createRequestPayload(noPredict=true, "", "", chunks, "", model): no model,
    # no stream field
    prepare = {
        "id_slot": 0,
        "input_prefix": "",
        "input_suffix": "",
        "input_extra": VSCODE_CHUNKS,
        "prompt": "",
        "n_predict": 0,
        "samplers": [],
        "cache_prompt": True,
        "t_max_prompt_ms": 500,
        "t_max_predict_ms": 1,
    }
    ok(coder.post("/infill", json=prepare))

    # completion.ts: prefix lines + '\n', the line's prefix as prompt, lineSuffix + '\n' + suffix
    # lines + '\n'; nindent = the line's indentation (sent only when not 0)
    line = GEOMETRY[CURSOR_LINE - 1]
    # getFIMCompletion -> createRequestPayload(false, ...): defaultRequestParams spread in
    fim = {
        "id_slot": 0,
        "input_prefix": "\n".join(GEOMETRY[: CURSOR_LINE - 1]) + "\n",
        "input_suffix": "" + "\n" + "\n".join(GEOMETRY[CURSOR_LINE:]) + "\n",
        "input_extra": VSCODE_CHUNKS,
        "prompt": line,
        "n_predict": 128,
        "n_cmpl": 3,
        "top_k": 40,
        "top_p": 0.99,
        "stream": False,
        "samplers": ["top_k", "top_p", "infill"],
        "cache_prompt": True,
        "n_indent": len(line) - len(line.lstrip()),
        "t_max_prompt_ms": 500,
        "t_max_predict_ms": 500,
        "model": VSCODE_MODEL,
    }
    data = ok(coder.post("/infill", json=fim)).json()
    # getComplFromContent: {content} is one completion, else an array of {content}
    if isinstance(data, dict) and "content" in data:
        completions = [data["content"] or ""]
        # statusbar.showInfo reads these of a single answer (generation_settings.n_ctx unguarded)
        assert isinstance(data["tokens_cached"], int) and isinstance(data["generation_settings"]["n_ctx"], int)
        assert all(isinstance(data["timings"][k], (int, float)) for k in
                   ("prompt_n", "prompt_ms", "prompt_per_second", "predicted_n", "predicted_ms", "predicted_per_second"))
    else:
        assert isinstance(data, list) and len(data) > 0
        completions = list(dict.fromkeys(c.get("content") or "" for c in data))
    assert completions and all(isinstance(c, str) for c in completions)


def test_llama_vscode_chat_and_chat_edit(coder):
    # getChatCompletion -> createChatRequestPayload: no max_tokens (not configurable) at temperature 0.8
    chat = {
        "messages": [
            {"role": "system", "content": "You are an expert coder."},
            {"role": "user", "content": "Answer in one word: which Python keyword defines a function?"},
        ],
        "stream": False,
        "temperature": 0.8,
        "model": VSCODE_MODEL,
    }
    answer = ok(coder.post("/v1/chat/completions", json=chat)).json()
    assert isinstance(answer["choices"][0]["message"]["content"], str)  # LlamaChatResponse
    assert answer["model"] == SERVED

    # getChatEditCompletion -> createChatEditRequestPayload with prompts.CHAT_EDIT_TEXT
    edit_prompt = ("Modify the following original code according to the instructions. Output only the modified "
                   "code. No explanations.\n\ninstructions:\n{instructions}\n\noriginal code:\n{originalText}\n\n"
                   "modified code:").format(instructions="rename radius to r", originalText="    return radius * 2")
    edit = {
        "messages": [
            {"role": "system", "content": "You are an expert coder.\n" + "\n".join(GEOMETRY[:5])},
            {"role": "user", "content": edit_prompt},
        ],
        "stream": False,
        "cache_prompt": True,
        "temperature": 0.8,
        "top_p": 0.95,
        "model": VSCODE_MODEL,
    }
    answer = ok(coder.post("/v1/chat/completions", json=edit)).json()
    assert isinstance(answer["choices"][0]["message"]["content"], str)
    assert answer["model"] == SERVED


def test_llama_vscode_startup_probes(coder):
    # checkHealth (llama-server.ts): GET {endpoint}/health, `response.data.status` must be present
    assert "status" in ok(coder.get("/health")).json()
    # getToolsModelTokenLimits / the VS Code chat provider (llama-server.ts, llama-chat-model-provider.ts,
    # language-model-token-limits.ts): GET {endpoint}/v1/models; the entry whose id is the configured
    # model, else the only one; a llama.cpp one (owned_by "llamacpp", or a `meta` object) with
    # lm_max_input_tokens 0 (the default) sends GET /props (one model) and reads
    # default_generation_settings.n_ctx as the context size
    models = ok(coder.get("/v1/models")).json().get("data") or []
    matched = next((m for m in models if m["id"] == VSCODE_MODEL), models[0] if len(models) == 1 else None)
    assert matched is not None, models
    owned_by = matched.get("owned_by") if isinstance(matched.get("owned_by"), str) else ""
    assert owned_by.lower() == "llamacpp" or isinstance(matched.get("meta"), dict), matched
    props = ok(coder.get("/props")).json()
    assert props["default_generation_settings"]["n_ctx"] == N_CTX  # extractRuntimeContextSize


# == Continue (continuedev/continue) ===============================================================
# A model as users configure it: provider llama.cpp or openai, model "qwen2.5-coder:1.5b", apiBase
# http://localhost:8080 (/v1/ for openai). Its maxTokens defaults to DEFAULT_MAX_TOKENS, 4096
# (core/llm/constants.ts; configurable as completionOptions.maxTokens): capped here to CAP.
# Autocomplete (core/autocomplete/CompletionProvider.ts) sets temperature 0.01; its stop words are
# the Qwen template's (AutocompleteTemplate.ts) plus getStopTokens' commonStops.
CONTINUE_MODEL = "qwen2.5-coder:1.5b"
CONTINUE_STOPS = ["<|endoftext|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
                  "<|repo_name|>", "<|file_sep|>", "<|im_start|>", "<|im_end|>", "/src/", "#- coding: utf-8", "```"]
# LlamaCpp._streamComplete sends `Authorization: Bearer ${this.apiKey}`: with no key, "Bearer undefined"
CONTINUE_LLAMACPP_HEADERS = {"Content-Type": "application/json", "Authorization": "Bearer undefined"}


def continue_llamacpp_body(prompt: str, options: dict) -> dict:
    # core/llm/llms/LlamaCpp.ts: {model, prompt, stream: true, ..._convertArgs(options)}; JSON.stringify
    # drops the options left undefined (frequency_penalty, presence_penalty, min_p, mirostat, top_k, top_p)
    return {"model": CONTINUE_MODEL, "prompt": prompt, "stream": True, **options}


def assert_fills_the_gap(text: str) -> None:
    """Continue's autocomplete shows `text` at the cursor, after "    return " in circumference(radius):
    an expression of the radius on that line, cut before any of its stop words."""
    assert not any(stop in text for stop in CONTINUE_STOPS), text
    line = text.split("\n", 1)[0]
    assert "radius" in line, text


def test_continue_llamacpp_autocomplete_and_chat(coder):
    # autocomplete: streamComplete(prompt, {...completionOptions, raw: true}) on the Qwen FIM template
    # (qwenMultifileFimTemplate without snippets: "<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>")
    prompt = f"<|fim_prefix|>{PREFIX}<|fim_suffix|>{SUFFIX}<|fim_middle|>"
    body = continue_llamacpp_body(prompt, {"n_predict": CAP, "stop": CONTINUE_STOPS, "temperature": 0.01})
    response = ok(coder.post("/completion", json=body, headers=CONTINUE_LLAMACPP_HEADERS))
    values = continue_stream_sse(response.text)
    text = "".join(v["content"] for v in values if v.get("content"))  # `if (value.content) yield value.content`
    assert values[-1]["stop"] is True
    assert_fills_the_gap(text)

    # chat: "qwen2.5-coder:1.5b" autodetects the chatml template, so streamChat renders the messages
    # and calls _streamComplete with the chat's options (maxTokens only)
    chat_prompt = ("<|im_start|>system\nYou are a helpful coding assistant.<|im_end|>\n"
                   "<|im_start|>user\nWhat does math.pi hold? One sentence.<|im_end|>\n<|im_start|>assistant\n")
    body = continue_llamacpp_body(chat_prompt, {"n_predict": CAP})
    values = continue_stream_sse(ok(coder.post("/completion", json=body, headers=CONTINUE_LLAMACPP_HEADERS)).text)
    assert "".join(v["content"] for v in values if v.get("content")).strip()


def test_continue_openai_provider_chat_and_autocomplete(coder):
    # chat: BaseLLM.streamChat -> openaiAdapter.chatCompletionStream(toChatBody(...)): the fields left
    # undefined are dropped; OpenAIApi.modifyChatBody adds stream_options for a stream
    chat = {
        "messages": [
            {"role": "system", "content": "You are a helpful coding assistant."},
            {"role": "user", "content": "What does math.pi hold? One sentence."},
        ],
        "model": CONTINUE_MODEL,
        "max_tokens": CAP,  # 4096 by default (completionOptions.maxTokens)
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    chunks = openai_sdk_stream(ok(coder.post("/v1/chat/completions", json=chat)).text)
    assert_served(chunks)
    text = "".join((c["choices"][0]["delta"].get("content") or "") for c in chunks if c["choices"])
    assert text.strip()
    assert any(c.get("usage") for c in chunks)  # include_usage: the usage chunk Continue reports

    # autocomplete: CompletionProvider sets useLegacyCompletionsEndpoint, so OpenAI._streamChat goes to
    # _legacystreamComplete: _convertArgs(options, []) without messages, plus prompt and stream: true;
    # the Qwen repository-level template, with a snippet from another file
    prompt = (f"<|repo_name|>project\n<|file_sep|>shapes.py\n" + "\n".join(SHAPES) + "\n"
              f"<|file_sep|>geometry.py\n<|fim_prefix|>{PREFIX}<|fim_suffix|>{SUFFIX}<|fim_middle|>")
    complete = {
        "model": CONTINUE_MODEL,
        "max_tokens": CAP,
        "temperature": 0.01,
        "stream": True,
        "stop": CONTINUE_STOPS,  # getMaxStopWords: no limit for a local apiBase
        "prompt": prompt,
    }
    values = continue_stream_sse(ok(coder.post("/v1/completions", json=complete)).text)
    assert_served(values)
    # `if (value.choices?.[0]?.text && value.finish_reason !== "eos") yield value.choices[0].text`
    text = "".join(v["choices"][0]["text"] for v in values
                   if v.get("choices") and v["choices"][0].get("text") and v.get("finish_reason") != "eos")
    assert_fills_the_gap(text)


# == Tabby (TabbyML/tabby, crates/http-api-bindings) ===============================================
# CodeGenerationOptions: sampling_temperature 0.1, seed = the time in ms (default_seed());
# CompletionConfig.max_decoding_tokens 64 (the n_predict sent); presence_penalty 0.0
# (CompletionOptionsBuilder's default). The prompt is the model's prompt_template, here Tabby's
# for Qwen2.5-Coder on llama.cpp: "<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>".
TABBY_SEED = 1718031337271


def test_tabby_llama_cpp_completion(coder):
    # kind "llama.cpp/completion": LlamaCppEngine posts CompletionRequest to {api_endpoint}/completion
    body = {
        "seed": TABBY_SEED,
        "prompt": f"<|fim_prefix|>{PREFIX}<|fim_suffix|>{SUFFIX}<|fim_middle|>",
        "n_predict": 64,
        "temperature": 0.1,
        "stream": True,
        "penalty_last_n": 0,
        "presence_penalty": 0.0,
    }
    response = ok(coder.post("/completion", json=body))
    # every message is serde_json::from_str::<{content: String, stop: bool}>(..).unwrap() (a message
    # that is not, "[DONE]" included, panics) until one says stop
    text, stopped = "", False
    for message in event_source_messages(response.text):
        chunk = json.loads(message)
        assert isinstance(chunk["content"], str) and isinstance(chunk["stop"], bool), chunk
        text += chunk["content"]
        if chunk["stop"]:
            stopped = True
            break
    assert stopped


@pytest.mark.parametrize("kind", ["openai/completion", "openai/legacy_completion_no_fim"])
def test_tabby_openai_completion(coder, kind):
    # OpenAICompletionEngine posts CompletionRequest to {api_endpoint}/completions (api_endpoint ends
    # in /v1); model_name is required. "openai/completion" splits the FIM_TEMPLATE
    # "{prefix}<|FIM|>{suffix}" into prompt and suffix; "..._no_fim" sends the model's prompt_template
    # whole, with "suffix": null (an Option serialized without skip_serializing_if).
    if kind == "openai/completion":
        prompt, suffix = PREFIX, SUFFIX
    else:
        prompt, suffix = f"<|fim_prefix|>{PREFIX}<|fim_suffix|>{SUFFIX}<|fim_middle|>", None
    body = {
        "model": "Qwen2.5-Coder-0.5B",
        "prompt": prompt,
        "suffix": suffix,
        "max_tokens": 64,
        "temperature": 0.1,
        "stream": True,
        "presence_penalty": 0.0,
    }
    response = ok(coder.post("/v1/completions", json=body))
    # each message is {choices: [{text: String, finish_reason: Option<String>}]} (.expect on failure);
    # the first choice's text is yielded, and a finish_reason ends the stream
    chunks, finished = [], False
    for message in event_source_messages(response.text):
        chunk = json.loads(message)
        assert isinstance(chunk["choices"], list), chunk
        chunks.append(chunk)
        if chunk["choices"]:
            choice = chunk["choices"][0]
            assert isinstance(choice["text"], str)
            assert choice.get("finish_reason") is None or isinstance(choice["finish_reason"], str)
            if choice.get("finish_reason") is not None:
                finished = True
                break
    assert finished
    assert_served(chunks)


# == twinny (twinnydotdev/twinny) ===================================================================
# Defaults (package.json): temperature 0.2, numPredictFim 512 (configurable: capped here to CAP),
# keepAlive "5m", fileContextEnabled false. A Qwen coder model's FIM template ("codeqwen") with
# no file context: "<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>". llm.ts posts
# JSON.stringify(body) with `Authorization: ""` when no key is set, and reads the stream line by
# line: safeParseJsonResponse(line) is JSON.parse(line.split("data:")[1]) for a "data:" line
# (a line that does not parse is skipped).
TWINNY_HEADERS = {"Content-Type": "application/json", "Authorization": ""}
TWINNY_PROMPT = f"<|fim_prefix|>{PREFIX}<|fim_suffix|>{SUFFIX}<|fim_middle|>"


def twinny_events(text: str) -> list[dict]:
    events = []
    for line in text.split("\n"):
        try:
            events.append(json.loads(line.split("data:")[1] if line.startswith("data:") else line))
        except (ValueError, IndexError):
            continue
    return events


def test_twinny_llamacpp_fim(coder):
    # createStreamRequestBodyFim, case API_PROVIDERS.LlamaCpp; docs/providers.md: path /completion
    body = {"prompt": TWINNY_PROMPT, "stream": True, "temperature": 0.2, "max_tokens": CAP}
    events = twinny_events(ok(coder.post("/completion", json=body, headers=TWINNY_HEADERS)).text)
    # getFimDataFromProvider: data.content for llamacpp
    assert events and all(isinstance(e["content"], str) for e in events)
    # llama-server reads max_tokens where a body gives no n_predict (tools/server/server-task.cpp,
    # params_from_json_cmpl: n_predict, else max_completion_tokens, else max_tokens): twinny's
    # numPredictFim is the answer's bound, as the last event's generation_settings say
    last = events[-1]
    assert last["stop"] is True
    assert last["generation_settings"]["n_predict"] == CAP and last["tokens_predicted"] <= CAP, (
        last["generation_settings"]["n_predict"], last["tokens_predicted"], last["stop_type"])


def test_twinny_openai_compatible_completions(coder):
    # createStreamRequestBodyFim, case LMStudio / Deepseek (the OpenAI /v1/completions body, path
    # /v1/completions); getFimDataFromProvider's default branch reads choices[0].text
    body = {"model": "qwen2.5-coder:1.5b", "prompt": TWINNY_PROMPT, "stream": True, "temperature": 0.2,
            "max_tokens": CAP}
    events = twinny_events(ok(coder.post("/v1/completions", json=body, headers=TWINNY_HEADERS)).text)
    chunks = [e for e in events if isinstance(e, dict) and e.get("choices")]
    assert chunks and all(isinstance(c["choices"][0]["text"], str) for c in chunks)
    assert_served(chunks)


def test_twinny_openai_compatible_provider_body(coder):
    # createStreamRequestBodyFim, case OpenAICompatible: Ollama's /api/generate body (keep_alive
    # "5m", options.num_predict), sent to the path configured, here /v1/completions. twinny then reads
    # data.response, which neither llama-server nor plookup sends: only its acceptance is checked.
    # llama-server ignores "options", so the length is the model's own (the prompt's answer is short).
    body = {"model": "qwen2.5-coder:1.5b", "prompt": "<|fim_prefix|>def add(a, b):\n    return <|fim_suffix|>\n"
            "\n\nprint(add(1, 2))\n<|fim_middle|>", "stream": True, "keep_alive": "5m",
            "options": {"temperature": 0.2, "num_predict": 512}}
    events = twinny_events(ok(coder.post("/v1/completions", json=body, headers=TWINNY_HEADERS)).text)
    chunks = [e for e in events if isinstance(e, dict) and "choices" in e]
    assert chunks
    assert_served(chunks)


# == Zed (zed-industries/zed, OpenAI-compatible provider) ===========================================
# settings: language_models.openai_compatible.<name> = {api_url: "http://localhost:8080/v1",
# available_models: [{name: "gpt-4o-mini", max_tokens: 128000, max_output_tokens: CAP}]}; an API key
# is required by the provider (NoApiKey otherwise), so one is typed in and sent as Bearer.
# into_open_ai (crates/open_ai/src/completion.rs): stream = !model.starts_with("o1-"), stream_options
# Some(StreamOptions::default()) = {include_usage: true}, temperature request.temperature or 1.0,
# max_output_tokens as max_completion_tokens (capabilities.max_tokens_parameter false, the default;
# max_output_tokens is None unless configured, so capped here), stop [] and tools [] skipped when
# empty, parallel_tool_calls only with tools and the capability, prompt_cache_key only with its
# capability (false by default).
ZED_HEADERS = {"Content-Type": "application/json", "Authorization": "Bearer sk-local"}
ZED_TOOLS = [{
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Reads the content of the given file in the project.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string",
                       "description": "The relative path of the file to read."}},
                       "required": ["path"], "additionalProperties": False},
    },
}]


def zed_stream(text: str) -> list[dict]:
    """open_ai::stream_completion: each line's "data: " or "data:" prefix cut (other lines skipped),
    "[DONE]" skipped, the rest parsed as ResponseStreamResult: Ok {choices: Vec<ChoiceDelta {index,
    delta: Option, finish_reason: Option}>, usage: Option} or Err {error: {message}}."""
    events = []
    for line in text.split("\n"):
        if line.startswith("data: "):
            line = line[len("data: "):]
        elif line.startswith("data:"):
            line = line[len("data:"):]
        else:
            continue
        if line == "[DONE]":
            continue
        event = json.loads(line)
        assert "error" not in event or "choices" in event, event
        assert isinstance(event["choices"], list), event  # required: the usage chunk carries choices []
        for choice in event["choices"]:
            assert isinstance(choice["index"], int), choice
            delta = choice.get("delta")
            assert delta is None or delta.get("content") is None or isinstance(delta["content"], str)
        events.append(event)
    return events


@pytest.mark.parametrize("with_tools", [False, True], ids=["text", "agent-tools"])
def test_zed_openai_compatible_chat(coder, with_tools):
    # the text request asks for more than CAP tokens: max_completion_tokens (llama-server reads it as
    # n_predict) is what ends it
    question = ("In one sentence: what does geometry.py's area(radius) return?" if with_tools
                else "Write a 200-word story about a circle that wants to become a square.")
    body = {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": "You are a helpful assistant in a code editor."},
            {"role": "user", "content": question},
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_completion_tokens": CAP,
        "temperature": 1.0,
    }
    if with_tools:  # the agent panel: capabilities.tools is true by default, tool_choice left unset
        body["tools"] = ZED_TOOLS
    events = zed_stream(ok(coder.post("/v1/chat/completions", json=body, headers=ZED_HEADERS)).text)
    assert_served(events)
    choices = [c for e in events for c in e["choices"]]
    text = "".join((c.get("delta") or {}).get("content") or "" for c in choices)
    calls = [t for c in choices for t in ((c.get("delta") or {}).get("tool_calls") or [])]
    assert text.strip() or calls
    assert any(c.get("finish_reason") for c in choices)
    usage = [e["usage"] for e in events if e.get("usage")]
    assert usage and usage[-1]["completion_tokens"] <= CAP, usage[-1]


# -- Zed's llama.cpp provider (crates/language_models/src/provider/llama_cpp.rs, crates/llama_cpp/src/
# llama_cpp.rs): discovery at startup, then a chat request without a length (not configurable:
# "Let the server decide the output length") and a temperature only where the request sets one.


def test_zed_llama_cpp_provider_discovery_and_chat(coder):
    # get_models: GET {api_url}/v1/models, ListModelsResponse {data: [{id, meta?: {n_ctx?, n_ctx_train?},
    # architecture?: {input_modalities}, status?: {value}}]}; no `status` on any entry: single-model mode
    entries = ok(coder.get("/v1/models", headers={"Accept": "application/json"})).json()["data"]
    assert entries and all(isinstance(e["id"], str) for e in entries)
    assert not any(e.get("status") is not None for e in entries)
    entry = entries[0]
    meta = entry.get("meta") or {}
    # get_props(model=None): GET {api_url}/props, Props {default_generation_settings?: {n_ctx?},
    # modalities?: {vision}, chat_template_caps?: {supports_tool_calls, supports_tools}}
    props = ok(coder.get("/props", headers={"Accept": "application/json"})).json()
    n_ctx = (props.get("default_generation_settings") or {}).get("n_ctx")
    # model_from_entry: /props' n_ctx, else meta.n_ctx, else meta.n_ctx_train, else 131072 assumed
    max_tokens = (n_ctx if n_ctx else None) or meta.get("n_ctx") or meta.get("n_ctx_train") or 131_072
    assert max_tokens == N_CTX, (n_ctx, meta)
    assert isinstance((props.get("modalities") or {}).get("vision", False), bool)
    caps = props.get("chat_template_caps") or {}
    supports_tools = bool(caps.get("supports_tool_calls") or caps.get("supports_tools"))

    # to_llama_cpp_request: max_tokens None, stop only if any, temperature None (skipped), tools only
    # where /props says the template takes them, stream_options {include_usage: true}
    body = {
        "model": entry["id"],
        "messages": [
            {"role": "system", "content": "You are a helpful assistant in a code editor."},
            {"role": "user", "content": "In one sentence: what does geometry.py's area(radius) return?"},
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if supports_tools:
        body["tools"] = ZED_TOOLS
    raw = ok(coder.post("/v1/chat/completions", json=body, headers={"Content-Type": "application/json"})).text
    # stream_chat_completion: lines with "data: " (only that prefix), "[DONE]" skipped; each one a
    # ResponseStreamEvent {model, object, choices: [{index, delta: {content?, reasoning_content?,
    # tool_calls?}, finish_reason?}], usage?} or {error: {message}}
    events = []
    for line in raw.split("\n"):
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        event = json.loads(line[len("data: "):])
        assert "error" not in event, event
        assert isinstance(event["model"], str) and isinstance(event["object"], str) and isinstance(event["choices"], list)
        for choice in event["choices"]:
            assert isinstance(choice["index"], int) and isinstance(choice["delta"], dict), choice
        events.append(event)
    assert_served(events)
    first = [e["choices"][0] for e in events if e["choices"]]  # LlamaCppEventMapper reads the first choice
    text = "".join(c["delta"].get("content") or "" for c in first)
    assert text.strip()
    assert [c["finish_reason"] for c in first if c.get("finish_reason")] in (["stop"], ["length"], ["tool_calls"])
    usage = [e["usage"] for e in events if e.get("usage")]
    assert usage and all(isinstance(usage[-1][k], int) for k in ("prompt_tokens", "completion_tokens", "total_tokens"))
