"""OpenAI's Responses API (``POST /v1/responses``) as a conversion to and from chat completions.

Codex CLI speaks only the Responses API, while the server generates through its chat-completions
path (chat template, tool-call parsing, reasoning split, structured outputs). So a Responses
request becomes a chat-completions body (:func:`to_chat`), and the chat answer becomes a Response
object (:func:`from_chat`) or, streamed, the Responses API's server-sent events
(:class:`ResponseStream`). Everything here is pure functions over dicts; the route does the I/O.

What is served: a conversation sent whole in ``input`` (messages, function calls and their
outputs, reasoning), function tools, ``tool_choice``, ``text.format`` (JSON schema / JSON object),
the sampling fields and ``max_output_tokens``. What is not: ``previous_response_id`` (nothing is
stored, so ``store`` is accepted and moot), ``reasoning`` (echoed, not acted on: the chat route
takes no effort), images and files, and the hosted or freeform tools
(``local_shell``, ``web_search``, ``custom``...): they are left out of what the model is offered,
as llama-server does, since a chat model can only call functions.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any, Dict, List, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator

NO_PREVIOUS_RESPONSE = "previous_response_id: this server keeps no responses; send the whole conversation in input"

# The text a content part carries, by part type ("text": parts a chat-style client may send).
TEXT_PARTS = {"input_text": "text", "output_text": "text", "text": "text", "refusal": "refusal"}

ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}


class TextFormat(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    type: Literal["text", "json_schema", "json_object"]
    name: Optional[str] = None
    description: Optional[str] = None
    json_schema: Optional[Dict[str, Any]] = Field(None, alias="schema")  # "schema" would shadow BaseModel's
    strict: Optional[bool] = None

    @model_validator(mode="after")
    def _schema_named(self):
        if self.type == "json_schema" and (self.name is None or self.json_schema is None):
            raise ValueError("a json_schema format needs a name and a schema")
        return self


class TextConfig(BaseModel):
    format: Optional[TextFormat] = None
    verbosity: Optional[str] = None  # Codex sends it; a chat model has no such control


class ResponsesRequest(BaseModel):
    """The body of ``POST /v1/responses``: the fields this server reads or echoes (others are
    ignored, as Codex sends some only OpenAI serves: include, prompt_cache_key...)."""

    model_config = ConfigDict(extra="ignore")

    model: Optional[str] = None
    instructions: Optional[str] = None
    input: Union[str, List[Dict[str, Any]]]
    tools: Optional[List[Dict[str, Any]]] = None
    tool_choice: Union[Literal["auto", "none", "required"], Dict[str, Any], None] = None
    parallel_tool_calls: Optional[bool] = None
    max_output_tokens: Optional[int] = Field(None, ge=1)
    temperature: Optional[float] = Field(None, ge=0, le=2)
    top_p: Optional[float] = Field(None, ge=0, le=1)
    stream: bool = False
    text: Optional[TextConfig] = None
    reasoning: Optional[Dict[str, Any]] = None
    previous_response_id: Optional[str] = None
    store: Optional[bool] = None
    include: Optional[List[str]] = None
    metadata: Optional[Dict[str, str]] = None
    return_progress: Optional[bool] = None  # llama-server's: handed to the chat request, which says it is not served


# -- Responses request -> chat-completions request


def to_chat(request: ResponsesRequest) -> dict:
    """The chat-completions body that asks what `request` asks (ValueError: what cannot be
    asked of this server, worded for a 400)."""
    if request.previous_response_id:
        raise ValueError(NO_PREVIOUS_RESPONSE)
    body: dict = {"messages": chat_messages(request)}
    if request.model:
        body["model"] = request.model
    tools = function_tools(request.tools or [])
    if tools:  # a tool_choice without tools is an error on the chat route, as on OpenAI's
        body["tools"] = tools
        if request.tool_choice is not None:
            body["tool_choice"] = chat_tool_choice(request.tool_choice)
        if request.parallel_tool_calls is not None:
            body["parallel_tool_calls"] = request.parallel_tool_calls
    fields = {"max_tokens": request.max_output_tokens, "temperature": request.temperature, "top_p": request.top_p}
    body.update({key: value for key, value in fields.items() if value is not None})
    response_format = chat_response_format(request.text)
    if response_format is not None:
        body["response_format"] = response_format
    if request.return_progress:
        body["return_progress"] = True
    body["stream"] = request.stream
    if request.stream:  # the Responses stream ends with the usage, which only this chunk gives
        body["stream_options"] = {"include_usage": True}
    return body


def chat_messages(request: ResponsesRequest) -> list[dict]:
    messages = [{"role": "system", "content": request.instructions}] if request.instructions else []
    items = [{"role": "user", "content": request.input}] if isinstance(request.input, str) else request.input
    reasoning = None  # a reasoning item's text, for the assistant message after it
    joinable = False  # whether a function call joins messages[-1]: an assistant message from the previous item
    for i, item in enumerate(items):
        where = f"input[{i}]"
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "reasoning":
            reasoning = reasoning_text(item, where)
            continue
        if kind == "function_call" and joinable:
            messages[-1].setdefault("tool_calls", []).append(tool_call(item, where))
            message = messages[-1]
        elif kind == "function_call":
            message = {"role": "assistant", "tool_calls": [tool_call(item, where)]}
            messages.append(message)
        elif kind == "message":
            message = chat_message(item, where)
            messages.append(message)
        elif kind == "function_call_output":
            message = {"role": "tool", "tool_call_id": required(item, "call_id", where),
                       "content": text_of(required(item, "output", where), f"{where}.output")}  # fmt: skip
            messages.append(message)
        else:  # items of the tools this server does not offer (custom, local_shell, web_search...)
            continue
        joinable = message["role"] == "assistant"
        if joinable and reasoning:
            message["reasoning_content"] = reasoning
        reasoning = None
    return messages


def chat_message(item: dict, where: str) -> dict:
    role = ROLES.get(item.get("role"))
    if role is None:
        raise ValueError(f"{where}.role: {item.get('role')!r} is not one of {', '.join(ROLES)}")
    return {"role": role, "content": text_of(required(item, "content", where), f"{where}.content")}


def tool_call(item: dict, where: str) -> dict:
    function = {"name": required(item, "name", where), "arguments": required(item, "arguments", where)}
    return {"id": required(item, "call_id", where), "type": "function", "function": function}


def reasoning_text(item: dict, where: str) -> str:
    """A reasoning item's text: its reasoning_text content (what this server gives back), else
    its summary."""
    parts = item.get("content") or item.get("summary") or []
    return "\n".join(required(part, "text", where) for part in parts)


def text_of(content: Any, where: str) -> str:
    """A message content or a function call's output: a text, or text parts joined with newlines
    (as the chat route joins its text parts)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ValueError(f"{where}: a text or a list of content parts is expected")
    texts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        key = TEXT_PARTS.get(kind)
        if key is None or not isinstance(part.get(key), str):
            raise ValueError(f"{where}[{j}]: {kind} parts are not supported: this server serves text models")
        texts.append(part[key])
    return "\n".join(texts)


def required(item: dict, key: str, where: str) -> Any:
    if key not in item:
        raise ValueError(f"{where}: {item.get('type', 'the item')} needs {key}")
    return item[key]


def function_tools(tools: list[dict]) -> list[dict]:
    """The function tools in OpenAI chat's shape; the Responses API's other tool types have no
    chat equivalent and are not offered."""
    chat = []
    for i, tool in enumerate(tools):
        if tool.get("type") != "function":
            continue
        if not isinstance(tool.get("name"), str):
            raise ValueError(f"tools[{i}]: a function tool needs a name")
        keys = ("name", "description", "parameters", "strict")
        chat.append({"type": "function", "function": {k: tool[k] for k in keys if tool.get(k) is not None}})
    return chat


def chat_tool_choice(choice: Union[str, dict]) -> Union[str, dict]:
    if isinstance(choice, str):
        return choice
    if choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise ValueError(f"tool_choice: {choice.get('type')!r} is not served: auto, none, required or a function")


def chat_response_format(text: Optional[TextConfig]) -> Optional[dict]:
    form = text.format if text is not None else None
    if form is None or form.type == "text":
        return None
    if form.type == "json_object":
        return {"type": "json_object"}
    fields = {"name": form.name, "schema": form.json_schema, "strict": form.strict, "description": form.description}
    return {"type": "json_schema", "json_schema": {k: v for k, v in fields.items() if v is not None}}


# -- chat completion -> Response


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def reasoning_item(item_id: str, text: Optional[str], status: str) -> dict:
    """A reasoning item; `text` None: as added, before any text."""
    content = [] if text is None else [{"type": "reasoning_text", "text": text}]
    return {"id": item_id, "type": "reasoning", "summary": [], "content": content, "status": status}


def output_text(text: str) -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def message_item(item_id: str, text: Optional[str], status: str) -> dict:
    """An assistant message item; `text` None: as added, before any text."""
    content = [] if text is None else [output_text(text)]
    return {"id": item_id, "type": "message", "role": "assistant", "status": status, "content": content}


def function_call_item(item_id: str, call_id: str, name: str, arguments: str, status: str) -> dict:
    return {"id": item_id, "type": "function_call", "call_id": call_id, "name": name,
            "arguments": arguments, "status": status}  # fmt: skip


def usage_of(usage: Optional[dict]) -> Optional[dict]:
    """Chat-completions usage in the Responses API's words."""
    if usage is None:
        return None
    prompt, completion = usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return {
        "input_tokens": prompt,
        # cache_write_tokens: what OpenAI writes to its billed prompt cache; the server keeps no such cache
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {
            "reasoning_tokens": (usage.get("completion_tokens_details") or {}).get("reasoning_tokens", 0)
        },
        "total_tokens": usage.get("total_tokens", prompt + completion),
    }


def response(request: ResponsesRequest, response_id: str, created_at: int, model: str, output: list[dict],
             status: str = "in_progress") -> dict:  # fmt: skip
    """A Response object with the request's settings echoed, as the SDK's Response type wants
    them (tools: the function tools the model was offered)."""
    text = request.text.model_dump(by_alias=True, exclude_none=True) if request.text else {}
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "model": model,
        "output": output,
        "instructions": request.instructions,
        "tools": [dict(tool["function"], type="function") for tool in function_tools(request.tools or [])],
        "tool_choice": request.tool_choice or "auto",
        "parallel_tool_calls": True if request.parallel_tool_calls is None else request.parallel_tool_calls,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "max_output_tokens": request.max_output_tokens,
        "text": {"format": {"type": "text"}, **text},
        "reasoning": request.reasoning,
        "metadata": request.metadata or {},
        "previous_response_id": None,
        "error": None,
        "incomplete_details": None,
        "usage": None,
    }


def finished(shell: dict, finish_reason: Optional[str], usage: Optional[dict]) -> dict:
    """`shell` (a Response with its output) ended: completed, or incomplete where the token
    limit cut it (its last item then is the one cut)."""
    cut = finish_reason == "length"
    done = dict(shell, status="incomplete" if cut else "completed", completed_at=int(time.time()),
                usage=usage_of(usage))  # fmt: skip
    if cut:
        done["incomplete_details"] = {"reason": "max_output_tokens"}
    return done


def from_chat(result: dict, request: ResponsesRequest) -> dict:
    """The Response object of a chat completion `result` of `to_chat(request)`."""
    choice = result["choices"][0]
    message = choice["message"]
    output = []
    if message.get("reasoning_content"):
        output.append(reasoning_item(new_id("rs"), message["reasoning_content"], "completed"))
    if message.get("content"):
        output.append(message_item(new_id("msg"), message["content"], "completed"))
    for call in message.get("tool_calls") or []:
        name, arguments = call["function"]["name"], call["function"]["arguments"]
        output.append(function_call_item(new_id("fc"), call["id"], name, arguments, "completed"))
    if output and choice.get("finish_reason") == "length":
        output[-1]["status"] = "incomplete"
    model = result.get("model") or request.model or ""
    shell = response(request, new_id("resp"), result.get("created") or int(time.time()), model, output)
    return finished(shell, choice.get("finish_reason"), result.get("usage"))


# -- chat stream -> Responses stream


@dataclass
class OpenItem:
    """The output item a stream is adding to."""

    key: Any  # "reasoning", "message", or the chat tool call's index
    item: dict  # as added
    index: int  # its output_index
    text: str = ""  # its text so far (a function call's arguments)


class ResponseStream:
    """The Responses API's server-sent events from OpenAI chat stream chunks.

    Items follow one another as OpenAI's do: a reasoning item, a message, a function call per chat
    tool call, each done before the next is added. A chat
    stream that goes back to a kind of delta it left (content after a tool call) gets another
    item, so its Response differs from from_chat's, which has one of each, in that order."""

    def __init__(self, request: ResponsesRequest):
        self.request = request
        self.response_id = new_id("resp")
        self.created_at = int(time.time())
        self.model = request.model or ""  # the chunks' model once they name it
        self.sequence = 0
        self.output: list[dict] = []  # the items done
        self.open: Optional[OpenItem] = None

    def event(self, kind: str, **fields) -> dict:
        data = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return {"event": kind, "data": json.dumps(data)}

    def shell(self, status: str = "in_progress") -> dict:
        return response(self.request, self.response_id, self.created_at, self.model, list(self.output), status)

    def opening(self) -> list[dict]:
        shell = self.shell()
        return [self.event("response.created", response=shell), self.event("response.in_progress", response=shell)]

    def waiting(self) -> list[dict]:
        """While the prompt is evaluated: the response still in progress (as llama-server says
        its prompt's progress)."""
        return [self.event("response.in_progress", response=self.shell())]

    def events(self, chunk: dict) -> list[dict]:
        self.model = chunk.get("model") or self.model
        if not chunk.get("choices"):  # the usage chunk
            return []
        delta = chunk["choices"][0].get("delta") or {}
        events = []
        if delta.get("reasoning_content"):
            events += self.text_delta("reasoning", delta["reasoning_content"])
        if delta.get("content"):
            events += self.text_delta("message", delta["content"])
        for call in delta.get("tool_calls") or []:
            events += self.call_delta(call)
        return events

    def closing(self, finish_reason: Optional[str], usage: dict) -> list[dict]:
        cut = finish_reason == "length"
        events = self.close("incomplete" if cut else "completed")
        done = finished(self.shell(), finish_reason, usage)
        return events + [self.event(f"response.{done['status']}", response=done)]

    def failing(self, message: str) -> list[dict]:
        """The event that ends a stream whose generation failed, after the items done so far
        (Codex then reports `message`, where a stream cut short is only "stream closed before
        response.completed")."""
        failed = dict(self.shell("failed"), error={"code": "server_error", "message": message})
        return [self.event("response.failed", response=failed)]

    # the items

    def add(self, key: Any, item: dict) -> list[dict]:
        events = self.close("completed")
        self.open = OpenItem(key, item, len(self.output))
        events.append(self.event("response.output_item.added", output_index=self.open.index, item=item))
        if item["type"] != "function_call":
            part = {"type": "reasoning_text", "text": ""} if key == "reasoning" else output_text("")
            events.append(self.event("response.content_part.added", **self.where(), part=part))
        return events

    def where(self) -> dict:
        """The fields that place an event in the open item's (first and only) content part."""
        return {"item_id": self.open.item["id"], "output_index": self.open.index, "content_index": 0}

    def text_delta(self, key: str, piece: str) -> list[dict]:
        events = []
        if self.open is None or self.open.key != key:
            item_id = new_id("rs" if key == "reasoning" else "msg")
            item = (reasoning_item if key == "reasoning" else message_item)(item_id, None, "in_progress")
            events += self.add(key, item)
        self.open.text += piece
        if key == "reasoning":
            events.append(self.event("response.reasoning_text.delta", **self.where(), delta=piece))
        else:
            events.append(self.event("response.output_text.delta", **self.where(), delta=piece, logprobs=[]))
        return events

    def call_delta(self, call: dict) -> list[dict]:
        function = call.get("function") or {}
        key = ("call", call.get("index", 0))
        events = []
        if self.open is None or self.open.key != key:
            call_id, name = call.get("id") or new_id("call"), function.get("name") or ""
            events += self.add(key, function_call_item(new_id("fc"), call_id, name, "", "in_progress"))
        piece = function.get("arguments") or ""
        if piece:
            self.open.text += piece
            fields = {"item_id": self.open.item["id"], "output_index": self.open.index}
            events.append(self.event("response.function_call_arguments.delta", **fields, delta=piece))
        return events

    def close(self, status: str) -> list[dict]:
        """The events that finish the open item, if any, with `status`."""
        if self.open is None:
            return []
        item, text, kind = self.open.item, self.open.text, self.open.item["type"]
        if kind == "function_call":
            done = dict(item, arguments=text, status=status)
            fields = {"item_id": item["id"], "output_index": self.open.index}
            events = [self.event("response.function_call_arguments.done", **fields, arguments=text)]
        elif kind == "reasoning":
            done = reasoning_item(item["id"], text, status)
            events = [self.event("response.reasoning_text.done", **self.where(), text=text),
                      self.event("response.content_part.done", **self.where(), part=done["content"][0])]  # fmt: skip
        else:
            done = message_item(item["id"], text, status)
            events = [self.event("response.output_text.done", **self.where(), text=text, logprobs=[]),
                      self.event("response.content_part.done", **self.where(), part=done["content"][0])]  # fmt: skip
        events.append(self.event("response.output_item.done", output_index=self.open.index, item=done))
        self.output.append(done)
        self.open = None
        return events


def error_body(status: int, message: str, param: Optional[str] = None) -> dict:
    """OpenAI's error body, for a request the route refuses with `status`."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    return {"error": {"message": message, "type": kind, "param": param, "code": None}}
