"""Anthropic's Messages API (``POST /v1/messages``, ``/v1/messages/count_tokens``) as a
conversion to and from the OpenAI chat completions the server already answers.

Claude Code and the other Anthropic clients speak only this API; plookup generates through its
chat completions (tool calls parsed into ``message.tool_calls``, a reasoning model's thoughts in
``reasoning_content``), so a Messages request is turned into a chat-completions body
(:func:`to_chat`), and the answer back into an Anthropic message (:func:`from_chat`) or, streamed,
into Anthropic's server-sent events (:class:`MessageStream`). These are pure functions over dicts;
the routes that call them live with the server. llama-server's own conversion
(``server_chat_convert_anthropic_to_oai``) was the model, with these differences:

- A user turn's blocks keep their order: tool results become ``tool`` messages where they stand, so
  they follow the assistant's tool calls directly, as chat templates expect (Claude Code puts its
  reminders as text after the results).
- Claude Code's first system block, ``x-anthropic-billing-header: ...; cch=<hash>;``, changes on
  every request; at the very start of the prompt it would defeat the reuse of the prompt's prefix
  from one turn to the next, so it is dropped: it says nothing to the model.
- An image or document (or any block but text, thinking, tool use and tool result) is a
  ValueError naming the block: plookup serves text models. Redacted thinking is dropped: it is
  encrypted for Anthropic's own models.
- ``thinking`` and ``metadata`` are accepted and ignored: whether a model thinks is up to its chat
  template, and its reasoning comes back as thinking blocks either way (with an empty signature,
  as llama-server's, since nothing here signs them).
- Whether a completion stopped at one of ``stop_sequences`` cannot be told from an OpenAI answer;
  the server says which in ``stopping_word`` (llama-server's field, at the top of a result or of
  a stream's chunk) and it becomes ``stop_reason: "stop_sequence"``.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any, Dict, List, Optional, Union

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator
from typing_extensions import Annotated, Literal

# -- the request


class TextBlock(BaseModel):
    type: Literal["text"]
    text: str


class ThinkingBlock(BaseModel):
    type: Literal["thinking"]
    thinking: str


class RedactedThinkingBlock(BaseModel):
    type: Literal["redacted_thinking"]


class ToolUseBlock(BaseModel):
    type: Literal["tool_use"]
    id: str
    name: str
    input: Dict[str, Any]


class OtherBlock(BaseModel):
    """A block of a type this server does not take (an image, a document, a server tool's): kept
    by validation so that :func:`to_chat` can name it in its error."""

    type: str


def _block_type(known: frozenset):
    """The discriminator over `known` block types, any other being an :class:`OtherBlock`."""

    def block_type(block: Any) -> str:
        kind = block.get("type") if isinstance(block, dict) else getattr(block, "type", None)
        return kind if kind in known else "other"

    return Discriminator(block_type)


ResultPart = Annotated[
    Union[Annotated[TextBlock, Tag("text")], Annotated[OtherBlock, Tag("other")]],
    _block_type(frozenset({"text"})),
]


class ToolResultBlock(BaseModel):
    type: Literal["tool_result"]
    tool_use_id: str
    content: Union[str, List[ResultPart], None] = None  # is_error has no OpenAI field: the text says it


ContentBlock = Annotated[
    Union[
        Annotated[TextBlock, Tag("text")],
        Annotated[ThinkingBlock, Tag("thinking")],
        Annotated[RedactedThinkingBlock, Tag("redacted_thinking")],
        Annotated[ToolUseBlock, Tag("tool_use")],
        Annotated[ToolResultBlock, Tag("tool_result")],
        Annotated[OtherBlock, Tag("other")],
    ],
    _block_type(frozenset({"text", "thinking", "redacted_thinking", "tool_use", "tool_result"})),
]


class InputMessage(BaseModel):
    # Claude Code 2.1 also sends ``system`` messages between the turns (its agents' listings)
    role: Literal["user", "assistant", "system"]
    content: Union[str, List[ContentBlock]]


class Tool(BaseModel):
    """A client tool (no ``type``, or ``"custom"``), or a server tool (a versioned ``type`` such as
    ``web_search_20250305``), which this server does not run and leaves out."""

    type: Optional[str] = None
    name: str
    description: Optional[str] = None
    input_schema: Optional[Dict[str, Any]] = None

    @property
    def is_client_tool(self) -> bool:
        return self.type in (None, "custom")

    @model_validator(mode="after")
    def _schema_given(self):
        if self.is_client_tool and self.input_schema is None:
            raise ValueError(f"tool {self.name!r}: input_schema is required")
        return self


class ToolChoice(BaseModel):
    type: Literal["auto", "any", "tool", "none"]
    name: Optional[str] = None
    disable_parallel_tool_use: bool = False

    @model_validator(mode="after")
    def _name_given(self):
        if self.type == "tool" and not self.name:
            raise ValueError("tool_choice of type 'tool' needs the tool's name")
        return self


class Thinking(BaseModel):
    type: str  # "enabled", "disabled", and the newer "adaptive": all taken, none acted on
    budget_tokens: Optional[int] = None


class MessagesRequest(BaseModel):
    """The body of ``/v1/messages`` (and ``/v1/messages/count_tokens``, which has no max_tokens).
    Fields this server does not know (Claude Code's context_management, cache_control, ...) are
    ignored."""

    model_config = ConfigDict(extra="ignore")

    model: str
    messages: List[InputMessage]
    system: Union[str, List[TextBlock], None] = None
    max_tokens: Optional[int] = Field(default=None, ge=1)
    temperature: Optional[float] = Field(default=None, ge=0)
    top_p: Optional[float] = None
    top_k: Optional[int] = None
    stop_sequences: Optional[List[str]] = None
    stream: bool = False
    tools: Optional[List[Tool]] = None
    tool_choice: Optional[ToolChoice] = None
    thinking: Optional[Thinking] = None
    metadata: Optional[Dict[str, Any]] = None


# -- the request as a chat completion

BILLING_HEADER = re.compile(r"^x-anthropic-billing-header:[^\n]*\n?")


def to_chat(request: MessagesRequest) -> dict:
    """An OpenAI chat-completions body asking what `request` asks (see the module)."""
    body: dict = {"model": request.model, "messages": chat_messages(request), "stream": request.stream}
    tools = [function_tool(tool) for tool in request.tools or [] if tool.is_client_tool]
    if tools:
        body["tools"] = tools
        if request.tool_choice is not None:
            body["tool_choice"] = chat_tool_choice(request.tool_choice)
            if request.tool_choice.disable_parallel_tool_use:
                body["parallel_tool_calls"] = False
    sampling = {"max_tokens": request.max_tokens, "temperature": request.temperature, "top_p": request.top_p,
                "top_k": request.top_k, "stop": request.stop_sequences}  # fmt: skip
    body.update((key, value) for key, value in sampling.items() if value is not None)
    return body


def chat_messages(request: MessagesRequest) -> list[dict]:
    system = system_text(request.system)
    messages = [{"role": "system", "content": system}] if system else []
    for i, message in enumerate(request.messages):
        where = f"messages.{i}.content"
        if isinstance(message.content, str):
            messages.append({"role": message.role, "content": message.content})
        elif message.role == "system":  # where it stands: the prompt before it stays a cached prefix
            messages.append({"role": "system", "content": system_text([b for b in message.content if b.type == "text"])})
        elif message.role == "user":
            messages.extend(user_turn(message.content, where))
        else:
            messages.extend(assistant_turn(message.content, where))
    return messages


def system_text(system: Union[str, List[TextBlock], None]) -> str:
    """The system prompt's text, its blocks a line each, without Claude Code's billing header."""
    texts = [system or ""] if not isinstance(system, list) else [block.text for block in system]
    return "\n".join(text for text in (BILLING_HEADER.sub("", text) for text in texts) if text)


def user_turn(blocks: list, where: str) -> list[dict]:
    """A user turn's blocks in their order: each run of text a user message, each tool result a
    tool message."""
    messages, texts = [], []
    for j, block in enumerate(blocks):
        if block.type == "text":
            texts.append(block.text)
        elif block.type == "tool_result":
            if texts:
                messages.append({"role": "user", "content": "\n".join(texts)})
                texts = []
            messages.append({"role": "tool", "tool_call_id": block.tool_use_id,
                             "content": tool_result_text(block, f"{where}.{j}")})  # fmt: skip
        else:
            raise unsupported(block, f"{where}.{j}")
    if texts:
        messages.append({"role": "user", "content": "\n".join(texts)})
    return messages


def assistant_turn(blocks: list, where: str) -> list[dict]:
    """An assistant turn as one message: its text, its thinking as reasoning_content, its tool
    uses as tool calls (nothing, where the turn holds none of them)."""
    texts, thoughts, calls = [], [], []
    for j, block in enumerate(blocks):
        if block.type == "text":
            texts.append(block.text)
        elif block.type == "thinking":
            thoughts.append(block.thinking)
        elif block.type == "tool_use":
            # unescaped, as the model wrote it: the turn reads back as it was generated
            arguments = json.dumps(block.input, ensure_ascii=False)
            calls.append({"id": block.id, "type": "function", "function": {"name": block.name, "arguments": arguments}})
        elif block.type != "redacted_thinking":
            raise unsupported(block, f"{where}.{j}")
    if not (texts or thoughts or calls):
        return []
    message: dict = {"role": "assistant", "content": "\n".join(texts)}  # "", not None: templates print None
    if thoughts:
        message["reasoning_content"] = "\n".join(thoughts)
    if calls:
        message["tool_calls"] = calls
    return [message]


def tool_result_text(block: ToolResultBlock, where: str) -> str:
    if block.content is None or isinstance(block.content, str):
        return block.content or ""
    for k, part in enumerate(block.content):
        if part.type != "text":
            raise unsupported(part, f"{where}.content.{k}")
    return "\n".join(part.text for part in block.content)


def unsupported(block: BaseModel, where: str) -> ValueError:
    # llama-server's wording for an image ("image input is not supported"), which clients may match
    return ValueError(f"{where}: {block.type} input is not supported: plookup serves text only")


def function_tool(tool: Tool) -> dict:
    function = {"name": tool.name, "parameters": tool.input_schema}
    if tool.description is not None:
        function["description"] = tool.description
    return {"type": "function", "function": function}


def chat_tool_choice(choice: ToolChoice) -> Union[str, dict]:
    if choice.type == "tool":
        return {"type": "function", "function": {"name": choice.name}}
    return {"auto": "auto", "any": "required", "none": "none"}[choice.type]


# -- the answer as a message


def from_chat(result: dict, model: str) -> dict:
    """An Anthropic message from the OpenAI chat completion `result`."""
    choice = result["choices"][0]
    content = message_blocks(choice["message"])
    used_tools = any(block["type"] == "tool_use" for block in content)
    word = result.get("stopping_word") or None
    return {
        "id": message_id(), "type": "message", "role": "assistant", "model": model, "content": content,
        "stop_reason": stop_reason(choice.get("finish_reason"), word, used_tools), "stop_sequence": word,
        "usage": message_usage(result),
    }  # fmt: skip


def message_blocks(message: dict) -> list[dict]:
    """Thinking first, then text, then the tool uses: the order Anthropic's models answer in."""
    blocks = []
    if message.get("reasoning_content"):
        blocks.append({"type": "thinking", "thinking": message["reasoning_content"], "signature": ""})
    if message.get("content"):
        blocks.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or []:
        blocks.append({"type": "tool_use", "id": call["id"], "name": call["function"]["name"],
                       "input": tool_input(call["function"].get("arguments"))})  # fmt: skip
    return blocks


def tool_input(arguments: Optional[str]) -> dict:
    """A tool call's arguments as a tool use's input, which must be an object: arguments cut
    short by max_tokens (or none at all) are an empty one."""
    try:
        value = json.loads(arguments or "")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def stop_reason(finish_reason: Optional[str], stopping_word: Optional[str], used_tools: bool) -> str:
    if finish_reason == "length":
        return "max_tokens"
    if used_tools or finish_reason == "tool_calls":
        return "tool_use"
    return "stop_sequence" if stopping_word else "end_turn"


def message_usage(result: dict) -> dict:
    """Anthropic counts the prompt tokens read from a cache apart from the others: plookup's
    ``timings.cache_n`` are those it reused from the previous prompt."""
    usage, cached = result["usage"], result.get("timings", {}).get("cache_n", 0)
    return {"input_tokens": usage["prompt_tokens"] - cached, "cache_read_input_tokens": cached,
            "output_tokens": usage["completion_tokens"]}  # fmt: skip


def message_id() -> str:
    return f"msg_{uuid.uuid4().hex[:24]}"


# -- the answer streamed


def event(name: str, **fields) -> dict:
    """One server-sent event: Anthropic names each event by its data's type."""
    return {"event": name, "data": json.dumps({"type": name, **fields}, ensure_ascii=False)}


class MessageStream:
    """Anthropic's server-sent events from OpenAI chat stream chunks.

    Blocks are opened as the pieces come: a new one where the kind of piece (thinking, text, a
    tool call) changes or a new tool call index appears, so their indices count up from 0 as
    Anthropic's clients expect (they keep the blocks in a list and index it)."""

    def __init__(self, model: str, input_tokens: int):
        self.model, self.input_tokens = model, input_tokens
        self.started = False
        self.open: Optional[tuple] = None  # the open block: ("text"/"thinking", None) or ("tool_use", call index)
        self.index = -1  # the last block opened
        self.used_tools = False
        self.stopping_word: Optional[str] = None

    def events(self, chunk: dict) -> list[dict]:
        out = self.start()
        self.stopping_word = chunk.get("stopping_word") or self.stopping_word
        delta = (chunk["choices"][0].get("delta") or {}) if chunk.get("choices") else {}
        if delta.get("reasoning_content"):
            out += self.piece(("thinking", None), {"type": "thinking", "thinking": ""},
                              {"type": "thinking_delta", "thinking": delta["reasoning_content"]})  # fmt: skip
        if delta.get("content"):
            out += self.piece(("text", None), {"type": "text", "text": ""},
                              {"type": "text_delta", "text": delta["content"]})  # fmt: skip
        for call in delta.get("tool_calls") or []:
            out += self.tool_piece(call)
        return out

    def closing(self, finish_reason: Optional[str], output_tokens: int) -> list[dict]:
        """The events that end the message: the open block's end, the stop reason and usage."""
        reason = stop_reason(finish_reason, self.stopping_word, self.used_tools)
        return self.start() + self.close() + [
            event("message_delta", delta={"stop_reason": reason, "stop_sequence": self.stopping_word},
                  usage={"output_tokens": output_tokens}),
            event("message_stop"),
        ]  # fmt: skip

    def start(self) -> list[dict]:
        if self.started:
            return []
        self.started = True
        message = {"id": message_id(), "type": "message", "role": "assistant", "model": self.model, "content": [],
                   "stop_reason": None, "stop_sequence": None,
                   "usage": {"input_tokens": self.input_tokens, "output_tokens": 0}}  # fmt: skip
        return [event("message_start", message=message), event("ping")]

    def tool_piece(self, call: dict) -> list[dict]:
        # every tool-call delta carries its id and name, so the first one seen can open the block
        self.used_tools = True
        block = {"type": "tool_use", "id": call["id"], "name": call["function"]["name"], "input": {}}
        arguments = call["function"].get("arguments")
        delta = {"type": "input_json_delta", "partial_json": arguments} if arguments else None
        return self.piece(("tool_use", call["index"]), block, delta)

    def piece(self, key: tuple, block: dict, delta: Optional[dict]) -> list[dict]:
        """`delta` to the block `key`, opened as `block` unless it is the open one."""
        out = []
        if self.open != key:
            out = self.close()
            self.open, self.index = key, self.index + 1
            out.append(event("content_block_start", index=self.index, content_block=block))
        if delta is not None:
            out.append(event("content_block_delta", index=self.index, delta=delta))
        return out

    def close(self) -> list[dict]:
        if self.open is None:
            return []
        out = []
        if self.open[0] == "thinking":  # Anthropic's clients expect a signature before a thinking block ends
            signature = {"type": "signature_delta", "signature": ""}
            out.append(event("content_block_delta", index=self.index, delta=signature))
        out.append(event("content_block_stop", index=self.index))
        self.open = None
        return out


# -- errors

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 500: "api_error",
               503: "overloaded_error", 504: "timeout_error", 529: "overloaded_error"}  # fmt: skip


def error_body(status: int, message: str) -> dict:
    """Anthropic's error body for an answer of `status` (also the data of a stream's error event)."""
    kind = ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}
