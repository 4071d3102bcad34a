"""Coding agents' requests through `plookup serve`'s app, driven by the real `openai` and `anthropic`
SDKs on Qwen2.5-Coder-0.5B (its template's tool calls are Hermes' ``<tool_call>``): chat with tools
(auto, required, a named function; streamed and not), the turn after a call, OpenAI's Responses
API and Anthropic's Messages API, each answered with the calls as calls.

Greedy throughout: where the grammar binds (required, named) the call's shape does not depend on
the model's skill; where it does not (auto), the test says what this model writes."""

from __future__ import annotations

import json

import anthropic
import openai
import pytest
from fastapi.testclient import TestClient

import plookup
from conftest import CODER, LLAMA_KWARGS
from plookup.api.measured import NOTHING_MEASURED
from plookup.app.llama_cli import use_chat_template
from plookup.app.serve import app as serve_app
from plookup.app.serve.app import create_app

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
READ = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a file of the repository",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    },
}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
GREEDY = dict(model="qwen", temperature=0.0, max_tokens=64)


@pytest.fixture(scope="module")
def coder_llm(model_path):
    return plookup.Llama(model_path[CODER], **NOTHING_MEASURED, **LLAMA_KWARGS)


@pytest.fixture(scope="module")
def app_client(coder_llm):
    with TestClient(create_app(coder_llm, "qwen")) as client:
        yield client


@pytest.fixture(scope="module")
def oai(app_client):
    return openai.OpenAI(base_url="http://testserver/v1", api_key="unused", http_client=app_client, max_retries=0)


@pytest.fixture(scope="module")
def claude(app_client):
    return anthropic.Anthropic(base_url="http://testserver", api_key="unused", http_client=app_client, max_retries=0)


def only_call(message) -> tuple[str, dict]:
    assert message.tool_calls is not None and len(message.tool_calls) == 1, message
    call = message.tool_calls[0]
    assert call.id and call.type == "function"
    return call.function.name, json.loads(call.function.arguments)


def streamed_message(stream) -> tuple[str, list[dict], str]:
    """(content, calls, finish_reason) put together from a chat stream's deltas as clients do, each
    call delta checked to carry its index, id, name and a function object (opencode's AI SDK
    refuses id-only deltas)."""
    content, calls, finish = "", {}, None
    for chunk in stream:
        choice = chunk.choices[0] if chunk.choices else None
        if choice is None:
            continue
        content += choice.delta.content or ""
        for delta in choice.delta.tool_calls or ():
            assert delta.id and delta.function is not None and delta.function.name and delta.type == "function"
            call = calls.setdefault(delta.index, {"id": delta.id, "name": delta.function.name, "arguments": ""})
            assert (call["id"], call["name"]) == (delta.id, delta.function.name)
            call["arguments"] += delta.function.arguments or ""
        finish = choice.finish_reason or finish
    return content, [calls[i] for i in sorted(calls)], finish


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_a_required_call_is_a_call_streamed_or_not(oai, choice):
    whole = oai.chat.completions.create(messages=ASK, tools=[WEATHER, READ], tool_choice=choice, **GREEDY)
    assert whole.choices[0].finish_reason == "tool_calls"
    name, arguments = only_call(whole.choices[0].message)
    assert name == "get_weather" and arguments == {"city": "Paris"}
    assert not whole.choices[0].message.content
    stream = oai.chat.completions.create(messages=ASK, tools=[WEATHER, READ], tool_choice=choice, stream=True,
                                         **GREEDY)
    content, calls, finish = streamed_message(stream)
    assert (content, finish) == ("", "tool_calls")
    assert [(c["name"], c["arguments"]) for c in calls] == [("get_weather", whole.choices[0].message.tool_calls[0]
                                                             .function.arguments)]


def test_a_named_function_is_the_one_called(oai):
    choice = {"type": "function", "function": {"name": "read_file"}}
    whole = oai.chat.completions.create(messages=ASK, tools=[WEATHER, READ], tool_choice=choice, **GREEDY)
    assert only_call(whole.choices[0].message)[0] == "read_file"


def test_auto_lets_the_model_call_or_answer(oai):
    """Auto: the model chooses. Asked for the weather with the tool offered, this model calls it;
    asked for a sum, it answers in text. Either way no call markup is left in the content (once
    the model starts a call, the grammar holds it to a well-formed one)."""
    called = oai.chat.completions.create(messages=ASK, tools=[WEATHER], **GREEDY)
    assert called.choices[0].finish_reason == "tool_calls"
    assert only_call(called.choices[0].message) == ("get_weather", {"city": "Paris"})
    stream = oai.chat.completions.create(messages=ASK, tools=[WEATHER], stream=True, **GREEDY)
    content, calls, finish = streamed_message(stream)
    assert (content, finish, len(calls)) == ("", "tool_calls", 1)
    answered = oai.chat.completions.create(messages=[{"role": "user", "content": "What is 2 + 2? Answer in words."}],
                                           tools=[WEATHER], **GREEDY)
    message = answered.choices[0].message
    assert answered.choices[0].finish_reason == "stop" and not message.tool_calls
    assert message.content and "<tool_call>" not in message.content


def test_a_call_after_the_models_reasoning_in_prose(oai):
    """canitoolcall's reasoning-then-call: this model reasons in prose, then writes the call object
    untagged at the end; the grammar holds it once it names the tool, and it comes back as a call
    with the prose as content (llama-server reads an untagged call at the answer's start only)."""
    record = {"type": "function", "function": {"name": "record_answer", "description": "Record the final answer.",
                                               "parameters": {"type": "object", "properties": {"answer": {"type": "string"}},
                                                              "required": ["answer"]}}}
    ask = [{"role": "user", "content": "Think it through step by step: which number is larger, 9.11 or 9.9? "
                                       "Then record the larger number with the record_answer tool."}]
    # penalised as llama_cpp.server's clients are by default: unpenalised, this model's greedy
    # reasoning runs past 200 tokens before it gets to the call
    result = oai.chat.completions.create(messages=ask, tools=[record], extra_body={"repeat_penalty": 1.1},
                                         **dict(GREEDY, max_tokens=200))
    message = result.choices[0].message
    assert result.choices[0].finish_reason == "tool_calls" and message.content and "{" not in message.content
    assert only_call(message)[0] == "record_answer"


def test_none_offers_no_tool(oai):
    result = oai.chat.completions.create(messages=ASK, tools=[WEATHER], tool_choice="none", **GREEDY)
    assert not result.choices[0].message.tool_calls and result.choices[0].finish_reason in ("stop", "length")


def test_the_turn_after_a_call(oai, app_client):
    """qwen-code and opencode send the assistant's call with ``content: null``, then the tool's
    result: rendered as the template renders a call (its arguments an object, not a JSON string
    quoted again) and answered. (This small model calls the tool again; the turn is what is tested.)"""
    messages = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 24 degrees Celsius."},
    ]
    prompt = app_client.post("/apply-template", json={"messages": messages, "tools": [WEATHER]}).json()["prompt"]
    assert ('<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
            '</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\nSunny, 24 degrees Celsius.\n</tool_response>'
            '<|im_end|>\n<|im_start|>assistant\n') in prompt
    assert prompt.count("get_weather") == 2  # offered once, called once
    result = oai.chat.completions.create(messages=messages, tools=[WEATHER], **GREEDY)
    assert result.choices[0].finish_reason in ("stop", "tool_calls")


def test_tools_and_system_messages_rendered_as_llama_server_renders_them(app_client):
    """The template is handed each tool as llama-server hands it (name, description, parameters:
    a client's ``strict`` is left out) and each system message where it stands, so that both
    servers evaluate one prompt and answer it alike (Codex's first prompt was 23 tokens longer
    here). The line below is what llama-server's /apply-template gave for this tool, same model."""
    strict = {"type": "function", "function": dict(WEATHER["function"], strict=True)}
    messages = [{"role": "system", "content": "A."}, {"role": "developer", "content": "B."}] + ASK
    prompt = app_client.post("/apply-template", json={"messages": messages, "tools": [strict]}).json()["prompt"]
    assert ('\n{"type": "function", "function": {"name": "get_weather", "description": "Get the current weather '
            'in a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": '
            '["city"]}}}\n') in prompt
    assert "strict" not in prompt
    assert prompt.startswith("<|im_start|>system\nA.\n\n# Tools")
    assert "<|im_end|>\n<|im_start|>system\nB.<|im_end|>\n<|im_start|>user\n" in prompt


# Gemma's way with system messages: one, first, folded into the first user turn; any other raises.
ONE_SYSTEM_TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}{% set first = messages[0]['content'] + '\n\n' %}"
    "{% set rest = messages[1:] %}{% else %}{% set first = '' %}{% set rest = messages %}{% endif %}"
    "{% for m in rest %}{% if m['role'] == 'system' %}{{ raise_exception('one system message, first') }}{% endif %}"
    "<turn>{{ m['role'] }}\n{% if loop.first %}{{ first }}{% endif %}{{ m['content'] }}</turn>\n{% endfor %}"
    "{% if add_generation_prompt %}<turn>assistant\n{% endif %}")


def test_system_messages_folded_where_the_template_refuses_them(coder_llm):
    """Codex sends instructions and developer messages, Claude Code a system message between turns:
    a template that takes one system message, first, gets them folded into one, not a 400."""
    saved = coder_llm.chat_format, coder_llm.chat_handler
    use_chat_template(coder_llm, ("jinja", ONE_SYSTEM_TEMPLATE))  # as --chat-template does
    try:
        answered_with_folded_system(coder_llm)
    finally:
        coder_llm.chat_format, coder_llm.chat_handler = saved


def answered_with_folded_system(coder_llm):
    with TestClient(create_app(coder_llm, "qwen", chat_template=ONE_SYSTEM_TEMPLATE)) as client:
        messages = [{"role": "system", "content": "A."}, {"role": "user", "content": "Hi."},
                    {"role": "system", "content": "B."}]
        prompt = client.post("/apply-template", json={"messages": messages}).json()["prompt"]
        assert prompt == "<turn>user\nA.\n\nB.\n\nHi.</turn>\n<turn>assistant\n"
        answer = client.post("/v1/responses", json={"model": "qwen", "instructions": "A.", "max_output_tokens": 2,
                                                    "input": [{"role": "developer", "content": "B."},
                                                              {"role": "user", "content": "Hi."}]})
        assert answer.status_code == 200, answer.text
        assert answer.json()["usage"]["input_tokens"] == len(coder_llm.tokenize(prompt.encode(), add_bos=False,
                                                                                special=True))


def test_a_prompt_that_fits_is_answered_up_to_the_context(model_path):
    """As llama-server: the prompt alone is checked, and a max_tokens past the context ends at it
    (agents send large max_tokens by default; ignore_eos keeps the model from stopping first)."""
    # (its batch, capped by n_ctx, is a setting of its own: no exactness probe, which the length
    # of an answer does not depend on; SmolLM2, whose ~220 tokens to the end of the context take a
    # fifth of the code model's 12 s)
    small = plookup.Llama(model_path["smollm2"], **NOTHING_MEASURED, **dict(LLAMA_KWARGS, n_ctx=256))
    with TestClient(create_app(small, "smol")) as client:
        body = {"messages": [{"role": "user", "content": "Count from 1 to 5000, one number a line."}],
                "max_tokens": 100_000, "temperature": 0.0, "ignore_eos": True}
        answer = client.post("/v1/chat/completions", json=body).json()
    assert answer["choices"][0]["finish_reason"] == "length"
    assert answer["usage"]["prompt_tokens"] + answer["usage"]["completion_tokens"] == small.n_ctx()


def test_responses_with_tools_streamed_and_not(oai):
    tool = {"type": "function", "name": "get_weather", "description": "Get the current weather in a city",
            "parameters": WEATHER["function"]["parameters"]}
    kwargs = dict(model="qwen", input="What is the weather in Paris?", tools=[tool], tool_choice="required",
                  temperature=0.0, max_output_tokens=64)
    whole = oai.responses.create(**kwargs)
    calls = [item for item in whole.output if item.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather" and json.loads(calls[0].arguments) == {"city": "Paris"}
    events = list(oai.responses.create(stream=True, **kwargs))
    kinds = [event.type for event in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert "response.function_call_arguments.delta" in kinds
    final = events[-1].response
    streamed = [item for item in final.output if item.type == "function_call"]
    assert [(c.name, c.arguments) for c in streamed] == [(calls[0].name, calls[0].arguments)]
    # the same prompt again: all but its last token found in the cache, and said so
    assert final.usage.input_tokens == whole.usage.input_tokens
    assert final.usage.input_tokens_details.cached_tokens == whole.usage.input_tokens - 1
    plain = oai.responses.create(model="qwen", instructions="Answer briefly.", input="Say hello.", temperature=0.0,
                                 max_output_tokens=16)
    assert plain.output_text and plain.status in ("completed", "incomplete")


def test_agent_streams_open_before_the_prompt_is_evaluated(oai, app_client, monkeypatch):
    """Responses and Messages streams send their opening events at once and keep sending events
    (``response.in_progress``, Anthropic's ``ping``) while a long prompt is evaluated, so that an
    agent's idle timeout does not fire on a slow machine; the answer after them is unchanged."""
    monkeypatch.setattr(serve_app, "WAITING_EVERY", 0.01)
    # ~330 tokens: a second or more of prompt evaluation, a hundred waits of 0.01 s
    long_input = "Describe this list in detail. " + " ".join(f"item {i}," for i in range(80))
    events = list(oai.responses.create(model="qwen", input=long_input, stream=True, temperature=0.0,
                                       max_output_tokens=4))
    kinds = [event.type for event in events]
    first_output = kinds.index("response.output_item.added")
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.incomplete"
    assert kinds[2:first_output] and set(kinds[2:first_output]) == {"response.in_progress"}
    assert [event.sequence_number for event in events] == list(range(len(events)))
    whole = oai.responses.create(model="qwen", input=long_input, temperature=0.0, max_output_tokens=4)
    assert events[-1].response.output_text == whole.output_text
    body = {"model": "any", "max_tokens": 4, "temperature": 0.0, "stream": True,
            "messages": [{"role": "user", "content": long_input + " (again)"}]}
    with app_client.stream("POST", "/v1/messages", json=body) as response:
        names = [line[len("event: "):] for line in response.iter_lines() if line.startswith("event: ")]
    assert names[:2] == ["message_start", "ping"] and names[-1] == "message_stop"
    assert names.index("content_block_start") > 2 and set(names[1:names.index("content_block_start")]) == {"ping"}


def test_responses_refuses_what_it_does_not_serve(oai):
    with pytest.raises(openai.BadRequestError, match="previous_response_id"):
        oai.responses.create(model="qwen", input="hi", previous_response_id="resp_123", max_output_tokens=4)
    # as on the chat route (llama.cpp's test_responses_stream_with_llama_telemetry asks for it)
    with pytest.raises(openai.BadRequestError, match="return_progress is not served: plookup streams no prompt-processing"):
        oai.responses.create(model="qwen", input="hi", max_output_tokens=4, extra_body={"return_progress": True})


def test_messages_with_tools_streamed_and_not(claude):
    tool = {"name": "get_weather", "description": "Get the current weather in a city",
            "input_schema": WEATHER["function"]["parameters"]}
    kwargs = dict(model="claude-sonnet-4-5", max_tokens=64, extra_body={"temperature": 0.0}, tools=[tool],
                  tool_choice={"type": "any"}, messages=[{"role": "user", "content": "What is the weather in Paris?"}],
                  system=[{"type": "text", "text": "You are a helpful assistant.", "cache_control": {"type": "ephemeral"}}])
    whole = claude.messages.create(**kwargs)
    assert whole.stop_reason == "tool_use" and whole.model == "claude-sonnet-4-5"
    uses = [block for block in whole.content if block.type == "tool_use"]
    assert len(uses) == 1 and uses[0].name == "get_weather" and uses[0].input == {"city": "Paris"}
    with claude.messages.stream(**kwargs) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    assert [(b.name, b.input) for b in final.content if b.type == "tool_use"] == [("get_weather", {"city": "Paris"})]
    answer = claude.messages.create(model="any", max_tokens=16, extra_body={"temperature": 0.0},
                                    messages=[{"role": "user", "content": "Say hello."}])
    assert answer.content[0].type == "text" and answer.content[0].text and answer.usage.input_tokens > 0


def test_messages_count_tokens_and_beta_path(claude, app_client):
    counted = claude.messages.count_tokens(model="any", messages=[{"role": "user", "content": "Say hello."}])
    assert counted.input_tokens > 0
    response = app_client.post("/v1/messages?beta=true", json={
        "model": "any", "max_tokens": 4, "temperature": 0.0, "messages": [{"role": "user", "content": "Say hello."}]})
    assert response.status_code == 200 and response.json()["type"] == "message"


def test_messages_errors_in_anthropics_shape(claude):
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    with pytest.raises(anthropic.BadRequestError) as refused:
        claude.messages.create(model="any", max_tokens=4, messages=[{"role": "user", "content": [image]}])
    assert refused.value.body["type"] == "error" and refused.value.body["error"]["type"] == "invalid_request_error"
    assert "image" in refused.value.body["error"]["message"]


def test_claude_codes_first_request_shapes(claude):
    """What Claude Code 2.1 sends on its first turn and once broke the server: a ``system`` message
    between the turns (with any model name it does not know), and a tool whose string may be
    524288 characters long (a grammar spelling that bound out overflowed llama.cpp's parser: the
    server died)."""
    workflow = {"name": "Workflow", "description": "Run a workflow script", "input_schema": {
        "type": "object", "required": ["script"], "properties": {"script": {"type": "string", "maxLength": 524288}}}}
    answer = claude.messages.create(model="qwen", max_tokens=8, tools=[workflow], extra_body={"temperature": 0.0},
                                    messages=[{"role": "user", "content": "Say hello."},
                                              {"role": "system", "content": "Available agent types: none"}])
    assert answer.type == "message" and answer.stop_reason in ("end_turn", "max_tokens", "tool_use")
