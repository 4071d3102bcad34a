"""The Anthropic Messages API conversions alone (no model): Claude Code's request bodies become the
chat completions they ask for, and chat completions become messages and event streams that the
real ``anthropic`` SDK reads, a stream to the same blocks as the whole answer however the chat
stream was cut into chunks."""

from __future__ import annotations

import json
import random

import anthropic
import pytest
from pydantic import ValidationError

from plookup.app.serve.messages_api import MessageStream, MessagesRequest, error_body, from_chat, to_chat

try:  # the SDK's HTTP library: httpx, which anthropic 2 takes as httpx2
    import httpx2 as httpx
except ImportError:
    import httpx

BILLING = "x-anthropic-billing-header: cc_version=2.1.101.e51; cc_entrypoint=cli; cch=a5145;"
SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}


def claude_code_body(**changes) -> dict:
    """A request as Claude Code sends one: system blocks with cache_control, tools, a server tool,
    thinking, metadata and fields this server does not know, a turn that used a tool."""
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 32000,
        "stream": True,
        "temperature": 1,
        "system": [
            {"type": "text", "text": BILLING},
            {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral", "ttl": "1h"}},
        ],
        "tools": [
            {"name": "Read", "description": "Read a file", "input_schema": SCHEMA,
             "cache_control": {"type": "ephemeral"}},
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
        ],
        "tool_choice": {"type": "auto"},
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "metadata": {"user_id": "user_abc"},
        "context_management": {"edits": []},
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "<system-reminder>hi</system-reminder>"},
                {"type": "text", "text": "Fix main.py", "cache_control": {"type": "ephemeral"}},
            ]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Read it first.", "signature": "c2ln"},
                {"type": "text", "text": "Reading."},
                {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"path": "main.py"}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "print(1)"}]},
                {"type": "text", "text": "<system-reminder>go on</system-reminder>"},
            ]},
        ],
    }  # fmt: skip
    body.update(changes)
    return body


def chat(body: dict) -> dict:
    return to_chat(MessagesRequest.model_validate(body))


# -- requests


def test_a_claude_code_request_becomes_the_chat_completion_it_asks_for():
    assert chat(claude_code_body()) == {
        "model": "claude-sonnet-4-5",
        "messages": [
            {"role": "system", "content": "You are Claude Code.\nBe brief."},
            {"role": "user", "content": "<system-reminder>hi</system-reminder>\nFix main.py"},
            {"role": "assistant", "content": "Reading.", "reasoning_content": "Read it first.",
             "tool_calls": [{"id": "toolu_1", "type": "function",
                             "function": {"name": "Read", "arguments": '{"path": "main.py"}'}}]},
            {"role": "tool", "tool_call_id": "toolu_1", "content": "print(1)"},
            {"role": "user", "content": "<system-reminder>go on</system-reminder>"},
        ],
        "stream": True,
        "tools": [{"type": "function",
                   "function": {"name": "Read", "parameters": SCHEMA, "description": "Read a file"}}],
        "tool_choice": "auto",
        "max_tokens": 32000,
        "temperature": 1.0,
    }  # fmt: skip


def test_the_billing_header_goes_from_a_system_text_too_and_the_rest_stays():
    body = claude_code_body(system=f"{BILLING}\nYou are Claude Code.")
    assert chat(body)["messages"][0] == {"role": "system", "content": "You are Claude Code."}
    assert chat(claude_code_body(system="Plain."))["messages"][0] == {"role": "system", "content": "Plain."}
    assert chat(claude_code_body(system=[{"type": "text", "text": BILLING}]))["messages"][0]["role"] == "user"


def test_a_simple_request_asks_only_what_it_says():
    body = {"model": "m", "max_tokens": 50, "messages": [{"role": "user", "content": "Hello"},
                                                         {"role": "assistant", "content": "Hi"}]}  # fmt: skip
    assert chat(body) == {"model": "m", "messages": [{"role": "user", "content": "Hello"},
                                                     {"role": "assistant", "content": "Hi"}],
                          "stream": False, "max_tokens": 50}  # fmt: skip


def test_sampling_and_stop_sequences_carry_over():
    body = {"model": "m", "max_tokens": 5, "temperature": 0.5, "top_p": 0.9, "top_k": 40,
            "stop_sequences": ["\n", "END"], "messages": []}  # fmt: skip
    assert chat(body) == {"model": "m", "messages": [], "stream": False, "max_tokens": 5, "temperature": 0.5,
                          "top_p": 0.9, "top_k": 40, "stop": ["\n", "END"]}  # fmt: skip


@pytest.mark.parametrize("choice, expected", [
    ({"type": "auto"}, "auto"),
    ({"type": "any"}, "required"),
    ({"type": "none"}, "none"),
    ({"type": "tool", "name": "Read"}, {"type": "function", "function": {"name": "Read"}}),
])  # fmt: skip
def test_tool_choice(choice, expected):
    body = chat(claude_code_body(tool_choice=choice))
    assert body["tool_choice"] == expected and "parallel_tool_calls" not in body
    body = chat(claude_code_body(tool_choice=dict(choice, disable_parallel_tool_use=True)))
    assert body["tool_choice"] == expected and body["parallel_tool_calls"] is False


def test_without_client_tools_there_are_no_tools_to_choose_from():
    body = chat(claude_code_body(tools=[{"type": "web_search_20250305", "name": "web_search"}]))
    assert "tools" not in body and "tool_choice" not in body


def test_tool_results_follow_the_calls_in_order_whatever_their_content():
    body = claude_code_body(messages=[
        {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "Read", "input": {}},
                                          {"type": "tool_use", "id": "b", "name": "Read", "input": {"path": "ü"}}]},
        {"role": "user", "content": [
            {"type": "text", "text": "Results:"},
            {"type": "tool_result", "tool_use_id": "a", "content": "one", "is_error": True},
            {"type": "tool_result", "tool_use_id": "b",
             "content": [{"type": "text", "text": "two"}, {"type": "text", "text": "lines"}]},
            {"type": "tool_result", "tool_use_id": "c"},
        ]},
    ])  # fmt: skip
    assert chat(body)["messages"][1:] == [
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "Read", "arguments": "{}"}},
            {"id": "b", "type": "function", "function": {"name": "Read", "arguments": '{"path": "ü"}'}}]},
        {"role": "user", "content": "Results:"},
        {"role": "tool", "tool_call_id": "a", "content": "one"},
        {"role": "tool", "tool_call_id": "b", "content": "two\nlines"},
        {"role": "tool", "tool_call_id": "c", "content": ""},
    ]  # fmt: skip


def test_redacted_thinking_and_empty_turns_are_left_out():
    body = claude_code_body(system=None, messages=[
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "opaque"}]},
        {"role": "user", "content": []},
    ])  # fmt: skip
    assert chat(body)["messages"] == [{"role": "user", "content": "Hi"}]


IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}


@pytest.mark.parametrize("messages, where, kind", [
    ([{"role": "user", "content": [IMAGE, {"type": "text", "text": "What is this?"}]}],
     "messages.0.content.0", "image"),
    ([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a",
                                    "content": [{"type": "text", "text": "File:"}, IMAGE]}]}],
     "messages.0.content.0.content.1", "image"),
    ([{"role": "user", "content": "Hi"},
      {"role": "assistant", "content": [{"type": "server_tool_use", "id": "s", "name": "web_search", "input": {}}]}],
     "messages.1.content.0", "server_tool_use"),
    ([{"role": "user", "content": [{"type": "document", "source": {"type": "text", "data": "x"}}]}],
     "messages.0.content.0", "document"),
])  # fmt: skip
def test_blocks_that_are_not_text_are_refused_by_name(messages, where, kind):
    with pytest.raises(ValueError, match=f"^{where}: {kind} input is not supported"):
        chat({"model": "m", "max_tokens": 10, "messages": messages})


@pytest.mark.parametrize("change", [
    {"messages": None},
    {"messages": [{"role": "tool", "content": "Hi"}]},
    {"messages": [{"role": "user", "content": [{"type": "text"}]}]},
    {"messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "Read", "input": "x"}]}]},
    {"tool_choice": {"type": "tool"}},
    {"tool_choice": {"type": "sometimes"}},
    {"tools": [{"name": "Read"}]},
    {"max_tokens": 0},
])  # fmt: skip
def test_malformed_requests_fail_validation(change):
    body = {key: value for key, value in claude_code_body(**change).items() if value is not None}
    with pytest.raises(ValidationError):
        MessagesRequest.model_validate(body)


def test_count_tokens_bodies_need_no_max_tokens():
    assert "max_tokens" not in chat({"model": "m", "messages": [{"role": "user", "content": "Hello"}]})


# -- answers

USAGE = {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150}


def completion(content=None, reasoning=None, calls=(), finish="stop", **extra) -> dict:
    """A chat completion as the server answers one."""
    message = {"role": "assistant", "content": content}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = [{"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": args}}
                                 for i, (name, args) in enumerate(calls)]  # fmt: skip
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "local",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": USAGE, **extra}  # fmt: skip


COMPLETIONS = {
    "text": completion("Hello there, how can I help?"),
    "thinking and text": completion("4", reasoning="2+2 is 4, said plainly."),
    "a tool call": completion(None, calls=[("Read", '{"path": "main.py"}')], finish="tool_calls"),
    "everything": completion("Let me look at both.\n\n", reasoning="Two files to read.",
                             calls=[("Read", '{"path": "a.py", "limit": 10}'),
                                    ("Grep", '{"pattern": "def \\\\w+", "paths": ["x", "y"], '
                                             '"nested": {"k": [1, 2.5, null, true]}}')],
                             finish="tool_calls"),
    "a tool without arguments": completion(None, calls=[("Now", "{}"), ("Ls", '{"a": "ü…"}')], finish="tool_calls"),
    "cut short": completion("A long answ", finish="length"),
}  # fmt: skip


def test_a_whole_answer_becomes_a_message_the_sdk_reads():
    message = from_chat(COMPLETIONS["everything"], "claude-sonnet-4-5")
    assert message["id"].startswith("msg_") and message["type"] == "message" and message["role"] == "assistant"
    assert message["model"] == "claude-sonnet-4-5"
    assert message["content"] == [
        {"type": "thinking", "thinking": "Two files to read.", "signature": ""},
        {"type": "text", "text": "Let me look at both.\n\n"},
        {"type": "tool_use", "id": "call_0", "name": "Read", "input": {"path": "a.py", "limit": 10}},
        {"type": "tool_use", "id": "call_1", "name": "Grep",
         "input": {"pattern": "def \\w+", "paths": ["x", "y"], "nested": {"k": [1, 2.5, None, True]}}},
    ]  # fmt: skip
    assert message["stop_reason"] == "tool_use" and message["stop_sequence"] is None
    assert message["usage"] == {"input_tokens": 120, "cache_read_input_tokens": 0, "output_tokens": 30}
    parsed = anthropic.types.Message.model_validate(message)
    assert parsed.content[3].input["nested"] == {"k": [1, 2.5, None, True]}


@pytest.mark.parametrize("name", COMPLETIONS)
def test_every_answer_validates_as_an_sdk_message(name):
    anthropic.types.Message.model_validate(from_chat(COMPLETIONS[name], "m"))


@pytest.mark.parametrize("finish, extra, reason, sequence", [
    ("stop", {}, "end_turn", None),
    ("length", {}, "max_tokens", None),
    ("tool_calls", {}, "tool_use", None),
    ("stop", {"stopping_word": "END"}, "stop_sequence", "END"),
    ("stop", {"stopping_word": ""}, "end_turn", None),
])  # fmt: skip
def test_stop_reasons(finish, extra, reason, sequence):
    message = from_chat(completion("x", finish=finish, **extra), "m")
    assert (message["stop_reason"], message["stop_sequence"]) == (reason, sequence)


def test_reused_prompt_tokens_are_cache_reads():
    message = from_chat(completion("x", timings={"cache_n": 100, "prompt_n": 20}), "m")
    assert message["usage"] == {"input_tokens": 20, "cache_read_input_tokens": 100, "output_tokens": 30}


@pytest.mark.parametrize("arguments", ['{"path": "a.p', "", "[1, 2]", None])
def test_arguments_that_are_not_an_object_are_an_empty_input(arguments):
    message = from_chat(completion(None, calls=[("Read", arguments)], finish="length"), "m")
    assert message["content"] == [{"type": "tool_use", "id": "call_0", "name": "Read", "input": {}}]


def test_an_empty_answer_has_no_blocks():
    assert from_chat(completion(""), "m")["content"] == []


# -- streams


def cut(text: str, how) -> list[str]:
    """`text` in pieces: `how` characters each, or at random points (`how` a Random)."""
    if isinstance(how, random.Random):
        points = sorted(how.sample(range(1, len(text)), min(len(text) - 1, how.randint(0, 4)))) if len(text) > 1 else []
        return [text[a:b] for a, b in zip([0, *points], [*points, len(text)])]
    return [text[i:i + how] for i in range(0, len(text), how)] or [""]


def chunks(result: dict, how) -> list[dict]:
    """`result` as the server streams it: a role chunk, the reasoning's, content's and each tool
    call's pieces (a tool call's delta carries its index, id and name every time), and a chunk
    with the finish reason (and `stopping_word`, if the result has it)."""

    def chunk(delta, finish=None):
        return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "local",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip

    message = result["choices"][0]["message"]
    out = [chunk({"role": "assistant", "content": ""})]
    out += [chunk({"reasoning_content": piece}) for piece in cut(message.get("reasoning_content") or "", how) if piece]
    out += [chunk({"content": piece}) for piece in cut(message.get("content") or "", how) if piece]
    for i, call in enumerate(message.get("tool_calls") or []):
        for piece in cut(call["function"]["arguments"] or "", how):
            function = {"name": call["function"]["name"], "arguments": piece}
            out.append(chunk({"tool_calls": [{"index": i, "id": call["id"], "type": "function", "function": function}]}))
    last = chunk({}, result["choices"][0]["finish_reason"])
    if "stopping_word" in result:
        last["stopping_word"] = result["stopping_word"]
    return out + [last]


def stream_events(result: dict, how) -> list[dict]:
    stream = MessageStream("claude-sonnet-4-5", input_tokens=result["usage"]["prompt_tokens"])
    events = [e for c in chunks(result, how) for e in stream.events(c)]
    return events + stream.closing(result["choices"][0]["finish_reason"], result["usage"]["completion_tokens"])


def sse(events: list[dict]) -> bytes:
    return "".join(f"event: {e['event']}\ndata: {e['data']}\n\n" for e in events).encode()


def sdk_stream(body: bytes):
    """What the SDK makes of the server-sent events `body`, as ``messages.stream`` reads them."""

    def answer(request):
        assert request.url.path == "/v1/messages"
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    client = anthropic.Anthropic(api_key="unused", base_url="http://plookup.test", max_retries=0,
                                 http_client=httpx.Client(transport=httpx.MockTransport(answer)))  # fmt: skip
    return client.messages.stream(model="claude-sonnet-4-5", max_tokens=100,
                                  messages=[{"role": "user", "content": "Hi"}])


SPLITS = [1, 3, 1000, random.Random(0), random.Random(1), random.Random(2)]


@pytest.mark.parametrize("how", SPLITS, ids=["1", "3", "whole", "random0", "random1", "random2"])
@pytest.mark.parametrize("name", COMPLETIONS)
def test_a_stream_comes_to_the_whole_answers_message_however_it_was_cut(name, how):
    result = COMPLETIONS[name]
    with sdk_stream(sse(stream_events(result, how))) as stream:
        final = stream.get_final_message()
    whole = from_chat(result, "claude-sonnet-4-5")
    assert [block.model_dump(exclude_none=True) for block in final.content] == whole["content"]
    assert (final.stop_reason, final.stop_sequence) == (whole["stop_reason"], whole["stop_sequence"])
    assert (final.usage.input_tokens, final.usage.output_tokens) == (120, 30)
    assert final.model == "claude-sonnet-4-5" and final.id.startswith("msg_")


def test_a_stopping_word_in_the_stream_is_the_stop_sequence():
    with sdk_stream(sse(stream_events(completion("x", stopping_word="END"), 1))) as stream:
        final = stream.get_final_message()
    assert (final.stop_reason, final.stop_sequence) == ("stop_sequence", "END")


def test_the_events_come_in_anthropics_order():
    events = [{"event": e["event"], **json.loads(e["data"])} for e in stream_events(COMPLETIONS["everything"], 4)]
    assert all(e["event"] == e["type"] for e in events)
    assert [e["type"] for e in events[:2]] == ["message_start", "ping"]
    start = events[0]["message"]
    assert start["content"] == [] and start["usage"] == {"input_tokens": 120, "output_tokens": 0}
    assert start["stop_reason"] is None
    starts = [e for e in events if e["type"] == "content_block_start"]
    assert [(e["index"], e["content_block"]["type"]) for e in starts] == [
        (0, "thinking"), (1, "text"), (2, "tool_use"), (3, "tool_use")]
    assert starts[2]["content_block"] == {"type": "tool_use", "id": "call_0", "name": "Read", "input": {}}
    # each block's events follow one another from its start to its stop, the thinking's signature last
    order = [(e["type"], e.get("index"), e.get("delta", {}).get("type")) for e in events[2:-2]]
    for index in range(4):
        mine = [k for k, (_, i, _) in enumerate(order) if i == index]
        assert mine == list(range(mine[0], mine[-1] + 1))
        assert (order[mine[0]][0], order[mine[-1]][0]) == ("content_block_start", "content_block_stop")
    signature = order.index(("content_block_delta", 0, "signature_delta"))
    assert order[signature + 1] == ("content_block_stop", 0, None)
    assert events[-2]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert events[-2]["usage"] == {"output_tokens": 30}
    assert events[-1] == {"event": "message_stop", "type": "message_stop"}


def test_a_new_block_opens_where_the_kind_of_piece_changes():
    stream = MessageStream("m", 1)
    pieces = [{"content": "a"}, {"reasoning_content": "b"}, {"content": "c"}, {"content": "d"}]
    events = [e for p in pieces for e in stream.events({"choices": [{"index": 0, "delta": p}]})]
    starts = [json.loads(e["data"]) for e in events if e["event"] == "content_block_start"]
    assert [(s["index"], s["content_block"]["type"]) for s in starts] == [(0, "text"), (1, "thinking"), (2, "text")]


def test_a_stream_without_chunks_is_still_a_message():
    with sdk_stream(sse(MessageStream("m", 7).closing("stop", 0))) as stream:
        final = stream.get_final_message()
    assert final.content == [] and final.stop_reason == "end_turn" and final.usage.input_tokens == 7


def test_a_usage_chunk_without_choices_adds_nothing():
    stream = MessageStream("m", 1)
    assert [e["event"] for e in stream.events({"choices": [], "usage": USAGE})] == ["message_start", "ping"]
    assert stream.events({"choices": [], "usage": USAGE}) == []


# -- errors


@pytest.mark.parametrize("status, kind", [
    (400, "invalid_request_error"), (401, "authentication_error"), (404, "not_found_error"),
    (422, "invalid_request_error"), (429, "rate_limit_error"), (500, "api_error"), (502, "api_error"),
    (503, "overloaded_error"),
])  # fmt: skip
def test_error_bodies(status, kind):
    assert error_body(status, "why") == {"type": "error", "error": {"type": kind, "message": "why"}}


def test_an_error_event_in_a_stream_is_an_sdk_error():
    events = MessageStream("m", 1).events({"choices": [{"index": 0, "delta": {"content": "a"}}]})
    events.append({"event": "error", "data": json.dumps(error_body(503, "the server is busy"))})
    with pytest.raises(anthropic.APIStatusError, match="the server is busy"):
        with sdk_stream(sse(events)) as stream:
            stream.get_final_message()


def test_a_system_message_between_the_turns_stays_where_it_is():
    """Claude Code 2.1 sends its agents' listing as a ``system`` message after the first user turn."""
    request = MessagesRequest.model_validate({"model": "m", "max_tokens": 8, "system": "Be brief.", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "system", "content": "Available agent types: claude"},
        {"role": "system", "content": [{"type": "text", "text": "More."}]},
    ]})
    assert to_chat(request)["messages"] == [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
        {"role": "system", "content": "Available agent types: claude"}, {"role": "system", "content": "More."},
    ]
