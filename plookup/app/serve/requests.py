"""What the OpenAI routes take beyond llama_cpp.server's request schemas, turned into what
llama_cpp's create_* methods take.

- Structured outputs, ``response_format: {"type": "json_schema", "json_schema": {"name", "schema"}}``:
  llama_cpp's schema knows only ``json_object`` (with llama_cpp's own ``schema`` extension). Either
  becomes a grammar here, with llama_cpp's converter (``json_schema_to_gbnf``, what its chat handlers
  use); a schema it cannot convert is a 400 naming it, where llama_cpp's handlers fall back to
  any JSON without a word.
- Message content as a list of text parts: joined with newlines (as llama-server joins them for a
  template that takes text); an image part is a 400 naming it, since plookup serves text models.
- A prompt as token ids, or a list of prompts (strings or token-id lists): one choice per prompt.
- Messages as agents send them: an assistant message that only calls tools has ``content: null``
  (the spec allows it; llama_cpp's schema wants a string), a tool result is a ``role: "tool"``
  message with its ``tool_call_id``, and ``developer`` is the newer name of ``system``. Tools are
  OpenAI function tools, a function without ``parameters`` taking none.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Union

import llama_cpp
from llama_cpp.llama_grammar import JSON_GBNF, LlamaGrammar, json_schema_to_gbnf
from llama_cpp.server.types import CreateChatCompletionRequest, CreateCompletionRequest
from pydantic import BaseModel, ConfigDict, Field, field_validator
from typing_extensions import Literal, NotRequired, TypedDict

from .controls import LlamaOptions
from .errors import APIError
from .toolcalls.grammars import loosened


class JSONSchema(TypedDict):
    name: str
    description: NotRequired[str]
    schema: NotRequired[Dict[str, Any]]
    strict: NotRequired[Optional[bool]]


class JSONSchemaResponseFormat(TypedDict):
    """OpenAI's structured outputs."""

    type: Literal["json_schema"]
    json_schema: JSONSchema


ResponseFormat = Union[llama_cpp.ChatCompletionRequestResponseFormat, JSONSchemaResponseFormat]

# OpenAI's prompt: a text, texts, token ids, or lists of token ids (one choice each).
Prompt = Union[str, List[str], List[int], List[List[int]]]


def response_format_grammar(response_format: Optional[dict]) -> Optional[LlamaGrammar]:
    """The grammar that `response_format` asks for (None: free text)."""
    if response_format is None or response_format["type"] == "text":
        return None
    if response_format["type"] == "json_schema":
        param, schema = "response_format.json_schema.schema", response_format["json_schema"].get("schema")
    else:
        param, schema = "response_format.schema", response_format.get("schema")
    if schema is None:  # any JSON, as OpenAI's json_object
        return LlamaGrammar.from_string(JSON_GBNF, verbose=False)
    try:
        gbnf = json_schema_to_gbnf(json.dumps(loosened(schema)))  # (bounds a grammar can hold)
    except Exception as e:  # the converter asserts what it takes; a schema may trip anything else too
        reason = str(e) if isinstance(e, (AssertionError, ValueError)) and str(e) else f"{type(e).__name__}: {e}"
        raise APIError(400, f"{param}: this JSON schema cannot be turned into a grammar: {reason}",
                       param=param, code="invalid_json_schema") from e  # fmt: skip
    return LlamaGrammar.from_string(gbnf, verbose=False)


def join_text_parts(messages: Any) -> Any:
    """`messages` with every content that is a list of text parts joined into one text (a list
    holding any other part is left as it is, for :func:`check_text_only`)."""
    if not isinstance(messages, list):
        return messages  # the schema's own error names it
    joined = []
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in content):
            if all(isinstance(p.get("text"), str) for p in content):
                message = dict(message, content="\n".join(p["text"] for p in content))
        joined.append(message)
    return joined


def check_text_only(messages: List[dict]) -> None:
    """400 naming the first part that is not text (the schema lets a user message hold images)."""
    for i, message in enumerate(messages):
        content = message.get("content")
        if isinstance(content, list):
            for j, part in enumerate(content):
                if part.get("type") != "text":
                    param = f"messages.{i}.content.{j}"
                    raise APIError(400, f"{param}: plookup serves text only, not a {part.get('type')!r} part",
                                   param=param, code="unsupported_content")  # fmt: skip


def completion_prompts(prompt: Prompt, n_vocab: int) -> list[Union[str, List[int]]]:
    """The prompts of a completion request, one choice each: a text or a list of token ids, each
    id checked against the vocabulary (llama_cpp would hand an unknown id to llama.cpp)."""
    if isinstance(prompt, str):
        return [prompt]
    if not prompt:
        raise APIError(400, "prompt: an empty list holds no prompt", param="prompt")
    prompts = [prompt] if isinstance(prompt[0], int) else list(prompt)
    for i, one in enumerate(prompts):
        if isinstance(one, list):
            for k, token in enumerate(one):
                if not 0 <= token < n_vocab:
                    param = "prompt" if prompts[0] is prompt else f"prompt.{i}"
                    raise APIError(400, f"{param}: token id {token} at position {k} is outside the vocabulary "
                                        f"of {n_vocab}", param=param)  # fmt: skip
    return prompts


# -- the bodies of the /v1 routes (llama_cpp.server's, with llama-server's fields and these)


class PredictionTextPart(BaseModel):
    type: Literal["text"]
    text: str


class Prediction(BaseModel):
    """OpenAI's Predicted Outputs: text much of the output is expected to repeat."""

    type: Literal["content"]
    content: Union[str, List[PredictionTextPart]]


class ToolCallFunction(BaseModel):
    name: str
    arguments: Union[str, Dict[str, Any]] = "{}"


class ToolCall(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str = ""
    type: Literal["function"] = "function"
    function: ToolCallFunction


class ChatMessage(BaseModel):
    """One message of a chat, any role, as OpenAI's clients send them."""

    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: Optional[Union[str, List[Dict[str, Any]]]] = None
    name: Optional[str] = None
    tool_calls: Optional[List[ToolCall]] = None
    tool_call_id: Optional[str] = None
    reasoning_content: Optional[str] = None


def template_messages(messages: List[ChatMessage]) -> List[dict]:
    """The messages as dicts a chat template reads: only the fields given, ``content`` always a
    text ("" where null), ``developer`` as ``system``."""
    out = []
    for message in messages:
        m = message.model_dump(exclude_none=True)
        m["content"] = m.get("content") or ""
        if m["role"] == "developer":
            m["role"] = "system"
        out.append(m)
    return out


def folded_system(messages: List[dict]) -> Optional[List[dict]]:
    """`messages` with every system message made one, first (their texts joined by blank lines),
    for a template that refuses a second system message or one after the first turn (Gemma's):
    Codex sends two developer messages, Claude Code a system message between turns. None where
    there is nothing to fold."""
    systems = [m for m in messages if m["role"] == "system"]
    if not systems or (len(systems) == 1 and messages[0] is systems[0]):
        return None
    system = {"role": "system", "content": "\n\n".join(m["content"] for m in systems)}
    return [system] + [m for m in messages if m["role"] != "system"]


class FunctionTool(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str = Field(min_length=1)
    description: Optional[str] = None
    parameters: Dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class Tool(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str = "function"
    function: Optional[FunctionTool] = None


def function_tools(tools: Optional[List[Tool]]) -> Optional[List[dict]]:
    """The request's function tools as dicts (a tool of another type is not the model's to call)."""
    if tools is None:
        return None
    return [t.model_dump(exclude_none=True) for t in tools if t.type == "function" and t.function is not None]


class CompletionRequest(LlamaOptions, CreateCompletionRequest):
    prompt: Prompt = Field(default="", description="A text, texts, token ids, or lists of token ids (a choice each).")
    prediction: Optional[Prediction] = None


class ChatCompletionRequest(LlamaOptions, CreateChatCompletionRequest):
    # OpenAI answers 400 to a body without messages and to a negative max_tokens, which
    # llama_cpp.server's schema takes (0 stays "up to the context", as on its /v1/completions).
    messages: List[ChatMessage] = Field(min_length=1)
    tools: Optional[List[Tool]] = None
    tool_choice: Optional[Union[Literal["none", "auto", "required"], Dict[str, Any]]] = None
    parallel_tool_calls: Optional[bool] = None
    max_tokens: Optional[int] = Field(default=None, ge=0)
    response_format: Optional[ResponseFormat] = None
    prediction: Optional[Prediction] = None

    @field_validator("messages", mode="before")
    @classmethod
    def _text_parts(cls, messages):
        return join_text_parts(messages)
