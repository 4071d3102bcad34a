"""A chat request's tools: what they add to the prompt and the sampler, and how the answer reads.

llama-server with ``--jinja`` renders the request's ``tools`` into the model's own chat template,
constrains a call with a grammar (lazily, from the moment the model starts one, where the model
may answer in text; from the first token for ``tool_choice: "required"`` or a named function),
and parses the calls out of the text into ``tool_calls``. :class:`ToolPlan` is that decision for one
request, made once at admission from the body and the template's family
(:mod:`.toolcalls`); :class:`Answer` turns the generated text, whole or streamed, into OpenAI's
message: ``content``, ``reasoning_content``, ``tool_calls``, ``finish_reason: "tool_calls"``.

Drafting is unchanged inside a call: the grammar is a sampler of the request's chain, and every
emitted token, drafted or not, is the one the chain chose from its row, so no output leaves it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Optional, Union

import llama_cpp

from . import toolcalls
from .errors import APIError

ToolChoice = Union[str, dict, None]


class LazyGrammar(llama_cpp.LlamaGrammar):
    """A grammar that starts constraining once the generated text matches one of `patterns`
    (llama.cpp's ``llama_sampler_init_grammar_lazy_patterns``): before it the model writes freely."""

    def __init__(self, gbnf: str, patterns: list[str]):
        super().__init__(_grammar=gbnf)
        self.patterns = list(patterns)


def grammar_of(gbnf: str, patterns: list[str]) -> llama_cpp.LlamaGrammar:
    """The sampler's grammar: lazy where there are trigger patterns, else from the first token."""
    if patterns:
        return LazyGrammar(gbnf, patterns)
    return llama_cpp.LlamaGrammar.from_string(gbnf, verbose=False)


def chosen_name(choice: ToolChoice) -> Optional[str]:
    """The function a ``tool_choice`` names (``{"type": "function", "function": {"name": N}}``)."""
    if isinstance(choice, dict):
        function = choice.get("function") or {}
        return function.get("name") or choice.get("name")
    return None


@dataclass(frozen=True)
class ToolPlan:
    """What a chat request's tools mean, decided once: the family's format, the tools offered,
    whether a call is required (``tool_choice`` "required" or a named function: the grammar
    binds from the first token) and whether several calls may follow one another."""

    format: toolcalls.ToolFormat
    tools: tuple = ()
    required: bool = False
    parallel: bool = False
    reasons: bool = False  # the template writes <think> blocks: the answer's reasoning is parsed out

    @property
    def parses(self) -> bool:
        """Whether the answer is read for calls or reasoning (else its text is the content)."""
        return bool(self.tools) or self.reasons

    def messages(self, messages: list[dict]) -> list[dict]:
        """The messages as the template renders them (the family's shapes of past calls)."""
        return self.format.render_messages(messages, list(self.tools) or None)

    def template_tools(self) -> Optional[list]:
        """The tools the template is handed: none where the format says them in a message of its own.
        Each as llama-server hands it (common_chat_tools_to_json_oaicompat): a function's name,
        description and parameters only, in that order, so that both servers render one prompt
        (a client's ``strict``, say, would otherwise cost tokens and change the greedy answer)."""
        if not self.tools or self.format.name == "generic":
            return None
        return [template_tool(tool["function"]) for tool in self.tools]

    def grammar(self) -> Optional[llama_cpp.LlamaGrammar]:
        """The calls' grammar: lazy (auto: text or a call), or binding from the first token."""
        if not self.tools:
            return None
        gbnf = self.format.grammar(list(self.tools), self.parallel)
        return grammar_of(gbnf, [] if self.required else self.format.trigger_patterns())  # (generic's: none)

    def answer(self, prompt_end: str) -> "Answer":
        """The reader of this request's answer; `prompt_end`: the rendered prompt's last text, which
        says whether the model starts inside a reasoning block the template opened."""
        return Answer(self.format.bind(list(self.tools), prompt_end))


def template_tool(function: dict) -> dict:
    fields = {"name": function["name"], "description": function.get("description") or "",
              "parameters": function.get("parameters", {})}
    return {"type": "function", "function": fields}


def tool_plan(template: str, tools: Optional[list], choice: ToolChoice, parallel: Optional[bool]) -> ToolPlan:
    """The plan for a request's ``tools``, ``tool_choice`` and ``parallel_tool_calls`` on a model whose
    chat template is `template` (400 for a choice naming a function not offered). As llama-server:
    ``"none"`` offers no tool; one call at a time unless ``parallel_tool_calls`` says otherwise."""
    family = toolcalls.detect(template or "")
    reasons = "<think>" in (template or "")
    offered = [t for t in tools or () if isinstance(t, dict) and t.get("type", "function") == "function"]
    if choice == "none" or not offered:
        return ToolPlan(family, reasons=reasons)
    name = chosen_name(choice)
    if name is not None:
        named = [t for t in offered if t["function"]["name"] == name]
        if not named:
            raise APIError(400, f"tool_choice: the function {name!r} is not one of the request's tools",
                           param="tool_choice")
        offered = named
    elif choice not in (None, "auto", "required"):
        raise APIError(400, f"tool_choice: give none, auto, required or a function, not {choice!r}",
                       param="tool_choice")
    return ToolPlan(family.bind(offered), tuple(offered), required=name is not None or choice == "required",
                    parallel=bool(parallel), reasons=reasons)


def new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


@dataclass
class Answer:
    """The generated text of one choice read as OpenAI's message, whole or a stream at a time. A
    stream's deltas add up to the whole answer's message however its text was split: each chunk
    is parsed as a prefix of the text (:meth:`toolcalls.ToolFormat.parse` with ``partial``), and
    what went out before is never taken back."""

    format: toolcalls.ToolFormat
    text: str = ""
    parsed: toolcalls.Parsed = field(default_factory=toolcalls.Parsed)
    ids: list = field(default_factory=list)

    def call_id(self, index: int) -> str:
        while len(self.ids) <= index:
            self.ids.append(new_call_id())
        return self.ids[index]

    def message(self, text: str) -> dict:
        """The whole message's fields for the generated `text`."""
        parsed = self.format.parse(text)
        message: dict[str, Any] = {"content": parsed.content or (None if parsed.calls else "")}
        if parsed.reasoning:
            message["reasoning_content"] = parsed.reasoning
        if parsed.calls:
            message["tool_calls"] = [
                {"id": new_call_id(), "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in parsed.calls
            ]
        return message

    def reshape(self, result: dict) -> dict:
        """A whole chat completion with every choice's message parsed."""
        for choice in result.get("choices", []):
            message = choice["message"]
            message.update(self.message(message.get("content") or ""))
            if message.get("tool_calls"):
                choice["finish_reason"] = "tool_calls"
        return result

    def feed(self, piece: str, last: bool) -> tuple[list[dict], bool]:
        """(deltas, called) for the next `piece` of a stream's text; `last`: the stream's final
        piece (the text is then parsed as a whole); `called`: the answer holds a call."""
        self.text += piece
        current = self.format.parse(self.text, partial=not last)
        deltas = toolcalls.deltas(self.parsed, current, self.call_id)
        self.parsed = current
        return deltas, bool(current.calls)

    def chunks(self, chunk: dict) -> list[dict]:
        """A stream's chunk as the chunks that carry its parsed deltas (none while a piece is held
        back; the last one carries ``finish_reason``, "tool_calls" where the answer calls)."""
        choice = (chunk.get("choices") or [None])[0]
        if choice is None:
            return [chunk]
        delta = choice.get("delta") or {}
        finish = choice.get("finish_reason")
        deltas, called = self.feed(delta.get("content") or "", finish is not None)
        out = []
        if "role" in delta:
            deltas.insert(0, {"role": delta["role"]})
        for i, d in enumerate(deltas):
            out.append(with_choice(chunk, delta=d, finish_reason=None,
                                   logprobs=choice.get("logprobs") if i == 0 else None))
        if finish is not None:
            out.append(with_choice(chunk, delta={}, finish_reason="tool_calls" if called else finish, logprobs=None))
        return out


def with_choice(chunk: dict, **fields) -> dict:
    choice = dict(chunk["choices"][0], **fields)
    return dict(chunk, choices=[choice])


def template_of(llm, chat_template: Optional[str]) -> str:
    """The Jinja text of the template a model's chats are rendered with: `chat_template` where the
    server was given one (``--chat-template``), else the GGUF's ("" where it has none)."""
    if chat_template is not None:
        return chat_template
    return (getattr(llm, "metadata", None) or {}).get("tokenizer.chat_template", "")

