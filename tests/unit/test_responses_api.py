"""plookup.app.serve.responses_api: Responses API bodies to chat and back, read by the openai SDK.

No model: chat completions and their stream chunks are written here, and the SDK reads the
converted answers through an in-memory transport, as Codex CLI would read them over HTTP.
"""

from __future__ import annotations

import json

import openai
import pytest
from openai.types.responses import Response

try:  # the HTTP client the SDK is built on: httpx2 from openai 3, httpx before
    import httpx2 as http
except ImportError:
    import httpx as http

from plookup.app.serve.responses_api import (
    NO_PREVIOUS_RESPONSE,
    ResponsesRequest,
    ResponseStream,
    error_body,
    from_chat,
    to_chat,
)

SHELL_TOOL = {
    "type": "function",
    "name": "shell",
    "description": "Runs a shell command.",
    "strict": False,
    "parameters": {"type": "object", "properties": {"command": {"type": "array", "items": {"type": "string"}}},
                   "required": ["command"]},  # fmt: skip
}

# What Codex CLI sends for a second turn: its history whole (store false), with a tool not a function.
CODEX_BODY = {
    "model": "gemma",
    "instructions": "You are Codex.",
    "input": [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Sandbox: read-only."}]},
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "<environment_context>cwd</environment_context>"},
            {"type": "input_text", "text": "List the files."},
        ]},  # fmt: skip
        {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "I should run ls."}],
         "encrypted_content": None},  # fmt: skip
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Listing."}]},
        {"type": "function_call", "name": "shell", "arguments": '{"command":["ls"]}', "call_id": "call_1"},
        {"type": "function_call", "name": "shell", "arguments": '{"command":["pwd"]}', "call_id": "call_2"},
        {"type": "function_call_output", "call_id": "call_1", "output": "a.py\nb.py"},
        {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "/src"}]},
        {"type": "custom_tool_call", "call_id": "call_3", "name": "apply_patch", "input": "*** Begin Patch"},
    ],
    "tools": [SHELL_TOOL, {"type": "local_shell"}, {"type": "web_search"}, {
        "type": "custom", "name": "apply_patch", "format": {"type": "grammar", "syntax": "lark", "definition": "x"}}],
    "tool_choice": "auto",
    "parallel_tool_calls": False,
    "reasoning": {"effort": "medium", "summary": "auto"},
    "store": False,
    "stream": True,
    "include": ["reasoning.encrypted_content"],
    "prompt_cache_key": "5f0c",
    "text": {"verbosity": "medium"},
}


def test_codex_body_to_chat():
    chat = to_chat(ResponsesRequest.model_validate(CODEX_BODY))
    assert chat["messages"] == [
        {"role": "system", "content": "You are Codex."},  # as llama-server: kept apart (folded only where
        {"role": "system", "content": "Sandbox: read-only."},  # the template refuses a second one)
        {"role": "user", "content": "<environment_context>cwd</environment_context>\nList the files."},
        {"role": "assistant", "content": "Listing.", "reasoning_content": "I should run ls.", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "shell", "arguments": '{"command":["ls"]}'}},
            {"id": "call_2", "type": "function", "function": {"name": "shell", "arguments": '{"command":["pwd"]}'}},
        ]},  # fmt: skip
        {"role": "tool", "tool_call_id": "call_1", "content": "a.py\nb.py"},
        {"role": "tool", "tool_call_id": "call_2", "content": "/src"},
    ]
    function = {k: SHELL_TOOL[k] for k in ("name", "description", "parameters", "strict")}
    assert chat["tools"] == [{"type": "function", "function": function}]
    assert chat["tool_choice"] == "auto" and chat["parallel_tool_calls"] is False
    assert chat["model"] == "gemma"
    assert chat["stream"] is True and chat["stream_options"] == {"include_usage": True}
    assert "response_format" not in chat and "max_tokens" not in chat


def test_plain_input_and_options():
    request = ResponsesRequest.model_validate({
        "input": "Hi", "max_output_tokens": 64, "temperature": 0.2, "top_p": 0.9, "tools": [SHELL_TOOL],
        "tool_choice": {"type": "function", "name": "shell"}, "unknown_field": 1,
        "text": {"format": {"type": "json_schema", "name": "answer", "schema": {"type": "object"}, "strict": True}},
    })  # fmt: skip
    chat = to_chat(request)
    assert chat["messages"] == [{"role": "user", "content": "Hi"}]
    assert chat["max_tokens"] == 64 and chat["temperature"] == 0.2 and chat["top_p"] == 0.9
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "shell"}}
    assert chat["response_format"] == {
        "type": "json_schema", "json_schema": {"name": "answer", "schema": {"type": "object"}, "strict": True}}
    assert chat["stream"] is False and "stream_options" not in chat
    json_object = ResponsesRequest.model_validate({"input": "Hi", "text": {"format": {"type": "json_object"}}})
    assert to_chat(json_object)["response_format"] == {"type": "json_object"}


def test_items_without_type_and_lone_reasoning():
    request = ResponsesRequest.model_validate({"input": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Q1"},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "dropped: a user message is next"}]},
        {"role": "user", "content": "Q2"},
        {"type": "function_call", "name": "f", "arguments": "{}", "call_id": "c1"},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "thought"}]},
        {"role": "assistant", "content": "A2"},
        {"role": "developer", "content": "Mid-conversation."},
    ]})  # fmt: skip
    assert to_chat(request)["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Q1"},
        {"role": "user", "content": "Q2"},
        {"role": "assistant", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        {"role": "assistant", "content": "A2", "reasoning_content": "thought"},
        {"role": "system", "content": "Mid-conversation."},
    ]


@pytest.mark.parametrize("body, words", [
    ({"input": "Hi", "previous_response_id": "resp_1"}, NO_PREVIOUS_RESPONSE),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "data:,"}]}]},
     "input[0].content[0]: input_image parts are not supported"),
    ({"input": [{"type": "function_call_output", "call_id": "c", "output": [{"type": "input_image"}]}]},
     "input[0].output[0]: input_image parts"),
    ({"input": [{"role": "tool", "content": "x"}]}, "input[0].role: 'tool' is not one of"),
    ({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}, "input[0]: function_call needs call_id"),
    ({"input": "Hi", "tools": [SHELL_TOOL], "tool_choice": {"type": "web_search"}}, "tool_choice: 'web_search'"),
])  # fmt: skip
def test_refused(body, words):
    with pytest.raises(ValueError) as caught:
        to_chat(ResponsesRequest.model_validate(body))
    assert str(caught.value).startswith(words)


def test_bad_text_format_is_invalid():
    with pytest.raises(ValueError, match="needs a name and a schema"):
        ResponsesRequest.model_validate({"input": "Hi", "text": {"format": {"type": "json_schema"}}})


# -- answers

CALLS = [
    {"id": "call_a", "type": "function", "function": {"name": "shell", "arguments": '{"command": ["ls", "-la"]}'}},
    {"id": "call_b", "type": "function", "function": {"name": "shell", "arguments": '{"command": ["cat", "b.py"]}'}},
]
USAGE = {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150, "prompt_tokens_details": {
    "cached_tokens": 100}, "completion_tokens_details": {"reasoning_tokens": 7}}


def chat_result(content=None, reasoning=None, tool_calls=None, finish_reason="stop") -> dict:
    message = {"role": "assistant", "content": content, "reasoning_content": reasoning, "tool_calls": tool_calls}
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 1700000000, "model": "gemma",
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}], "usage": USAGE}  # fmt: skip


ANSWERS = {
    "text": chat_result(content="Two files: a.py and b.py. Ünïcode ✓"),
    "tools": chat_result(content="Let me look.", reasoning="The user wants files.", tool_calls=CALLS,
                         finish_reason="tool_calls"),  # fmt: skip
    "reasoning only": chat_result(reasoning="Hmm.", tool_calls=CALLS[:1], finish_reason="tool_calls"),
    "cut": chat_result(content="A long answ", reasoning="Thinking", finish_reason="length"),
}


def test_from_chat_is_an_sdk_response():
    request = ResponsesRequest.model_validate(CODEX_BODY)
    answer = from_chat(ANSWERS["tools"], request)
    parsed = Response.model_validate(answer)
    assert parsed.id.startswith("resp_") and parsed.status == "completed" and parsed.model == "gemma"
    reasoning, message, first, second = parsed.output
    assert reasoning.type == "reasoning" and reasoning.id.startswith("rs_")
    assert reasoning.content[0].text == "The user wants files." and reasoning.summary == []
    assert message.type == "message" and message.id.startswith("msg_") and message.status == "completed"
    assert parsed.output_text == "Let me look."
    assert [(c.type, c.call_id, c.name, c.arguments, c.status) for c in (first, second)] == [
        ("function_call", call["id"], "shell", call["function"]["arguments"], "completed") for call in CALLS]
    assert first.id.startswith("fc_") and first.id != second.id
    assert parsed.usage.input_tokens == 120 and parsed.usage.output_tokens == 30 and parsed.usage.total_tokens == 150
    assert parsed.usage.input_tokens_details.cached_tokens == 100
    assert parsed.usage.output_tokens_details.reasoning_tokens == 7
    assert [t.name for t in parsed.tools] == ["shell"]  # the tools the model was offered
    assert parsed.parallel_tool_calls is False and parsed.tool_choice == "auto"
    assert parsed.instructions == "You are Codex." and parsed.text.verbosity == "medium"


def test_cut_answer_is_incomplete():
    answer = from_chat(ANSWERS["cut"], ResponsesRequest(input="Hi", max_output_tokens=5))
    parsed = Response.model_validate(answer)
    assert parsed.status == "incomplete" and parsed.incomplete_details.reason == "max_output_tokens"
    assert [item.status for item in parsed.output] == ["completed", "incomplete"]
    assert parsed.max_output_tokens == 5


def test_error_body():
    assert error_body(400, "bad", "previous_response_id") == {"error": {
        "message": "bad", "type": "invalid_request_error", "param": "previous_response_id", "code": None}}
    assert error_body(500, "internal error")["error"]["type"] == "server_error"


# -- streams


def split(text, size):
    return [text[i:i + size] for i in range(0, len(text), size)] if text else []


def chunks_of(result: dict, size: int) -> list[dict]:
    """`result` as a chat stream whose text pieces are `size` characters (the usage chunk last),
    tool-call deltas carrying index, id, type and name in each (as the server's do)."""
    message, base = result["choices"][0]["message"], {k: result[k] for k in ("id", "created", "model")}

    def chunk(delta, finish_reason=None):
        return dict(base, object="chat.completion.chunk",
                    choices=[{"index": 0, "delta": delta, "finish_reason": finish_reason}])  # fmt: skip

    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"reasoning_content": piece}) for piece in split(message["reasoning_content"], size)]
    chunks += [chunk({"content": piece}) for piece in split(message["content"], size)]
    for index, call in enumerate(message["tool_calls"] or []):
        name, arguments = call["function"]["name"], call["function"]["arguments"]
        for piece in split(arguments, size) or [""]:
            function = {"name": name, "arguments": piece}
            chunks.append(chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                                 "function": function}]}))  # fmt: skip
    chunks.append(chunk({}, result["choices"][0]["finish_reason"]))
    chunks.append(dict(base, object="chat.completion.chunk", choices=[], usage=result["usage"]))
    return chunks


def sse(request: ResponsesRequest, chunks: list[dict]) -> bytes:
    """The Responses stream of `chunks`, as the route would send it."""
    stream = ResponseStream(request)
    events = stream.opening()
    for chunk in chunks:
        events += stream.events(chunk)
    events += stream.closing(chunks[-2]["choices"][0]["finish_reason"], chunks[-1]["usage"])
    return b"".join(f"event: {e['event']}\ndata: {e['data']}\n\n".encode() for e in events)


def client_serving(chunks: list[dict]) -> openai.OpenAI:
    """An SDK client whose server streams `chunks` as its answer to whatever it is sent."""

    def handle(http_request):
        request = ResponsesRequest.model_validate_json(http_request.content)
        to_chat(request)  # the route converts first: the body the SDK sends must pass
        return http.Response(200, headers={"content-type": "text/event-stream"}, content=sse(request, chunks))

    return openai.OpenAI(api_key="none", base_url="http://plookup.test/v1",
                         http_client=http.Client(transport=http.MockTransport(handle)))  # fmt: skip


def without_ids(answer: dict) -> dict:
    """`answer` without what differs between two conversions of one completion: ids and times."""
    answer = {k: v for k, v in answer.items() if k not in ("id", "created_at", "completed_at")}
    answer["output"] = [{k: v for k, v in item.items() if k != "id"} for item in answer["output"]]
    return answer


STREAM_BODY = {k: v for k, v in CODEX_BODY.items() if k != "stream"}


@pytest.mark.parametrize("size", [1, 3, 1000])
@pytest.mark.parametrize("answer", ["text", "tools", "reasoning only"])
def test_stream_read_by_the_sdk(answer, size):
    result = ANSWERS[answer]
    client = client_serving(chunks_of(result, size))
    events = list(client.responses.create(**STREAM_BODY, stream=True))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[0].type == "response.created" and events[1].type == "response.in_progress"
    assert events[0].response.status == "in_progress" and events[0].response.output == []
    completed = events[-1]
    assert completed.type == "response.completed"
    assert {e.response.id for e in events if hasattr(e, "response")} == {completed.response.id}
    whole = from_chat(result, ResponsesRequest.model_validate(CODEX_BODY))
    assert without_ids(completed.response.model_dump(mode="json", exclude_unset=True)) == without_ids(whole)

    # each item's events, in order, name it, and its deltas add up to what it is done with
    done = [e.item for e in events if e.type == "response.output_item.done"]
    assert [item.model_dump(exclude_unset=True) for item in done] == [
        item.model_dump(exclude_unset=True) for item in completed.response.output]  # fmt: skip
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == (result["choices"][0]["message"]["content"] or "")
    reasoning = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    assert reasoning == (result["choices"][0]["message"]["reasoning_content"] or "")
    for index, item in enumerate(completed.response.output):
        mine = [e for e in events if getattr(e, "output_index", None) == index]
        assert mine[0].type == "response.output_item.added" and mine[0].item.status == "in_progress"
        assert mine[-1].type == "response.output_item.done"
        assert all(getattr(e, "item_id", item.id) == item.id for e in mine)
        if item.type == "function_call":
            assert mine[0].item.call_id == item.call_id and mine[0].item.arguments == ""
            assert "".join(e.delta for e in mine if e.type.endswith("arguments.delta")) == item.arguments
            assert mine[-2].type == "response.function_call_arguments.done" and mine[-2].arguments == item.arguments


@pytest.mark.parametrize("size", [2, 1000])
def test_stream_helper_final_response(size):
    client = client_serving(chunks_of(ANSWERS["tools"], size))
    with client.responses.stream(**STREAM_BODY) as stream:
        final = stream.get_final_response()
    assert final.output_text == "Let me look."
    calls = [(item.call_id, item.name, item.arguments) for item in final.output if item.type == "function_call"]
    assert calls == [(call["id"], call["function"]["name"], call["function"]["arguments"]) for call in CALLS]
    assert final.usage.input_tokens_details.cached_tokens == 100


def test_cut_stream_ends_incomplete():
    events = list(client_serving(chunks_of(ANSWERS["cut"], 4)).responses.create(input="Hi", model="gemma", stream=True))
    last = events[-1]
    assert last.type == "response.incomplete" and last.response.incomplete_details.reason == "max_output_tokens"
    assert [item.status for item in last.response.output] == ["completed", "incomplete"]
    done = [e.item.status for e in events if e.type == "response.output_item.done"]
    assert done == ["completed", "incomplete"]
    whole = from_chat(ANSWERS["cut"], ResponsesRequest(input="Hi", model="gemma"))
    assert without_ids(last.response.model_dump(mode="json", exclude_unset=True)) == without_ids(whole)


def test_failed_stream():
    stream = ResponseStream(ResponsesRequest(input="Hi"))
    events = stream.opening() + stream.events(chunks_of(ANSWERS["text"], 5)[1]) + stream.failing("the model stopped")
    last = json.loads(events[-1]["data"])
    assert last["type"] == "response.failed" and last["sequence_number"] == len(events) - 1
    assert last["response"]["error"] == {"code": "server_error", "message": "the model stopped"}
    assert Response.model_validate(last["response"]).status == "failed"


def test_content_after_a_tool_call_gets_its_own_item():
    chunks = chunks_of(ANSWERS["tools"], 1000)
    late = chunks.pop(2)  # the content chunk (after the role and reasoning ones), moved after the calls
    chunks.insert(-2, late)
    events = list(client_serving(chunks).responses.create(input="Hi", stream=True))
    output = events[-1].response.output
    assert [item.type for item in output] == ["reasoning", "function_call", "function_call", "message"]
    assert output[-1].content[0].text == "Let me look." and events[-1].type == "response.completed"
