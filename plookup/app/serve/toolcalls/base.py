"""The parts every family shares: the parse result, the scan that splits an output into reasoning,
content and call sections, the stream deltas, and the message preparation for a chat template.

A family only says where its call sections start and how one section reads; this module keeps the
streaming promise for all of them: a partial parse holds back any tail that could still turn into
markup, so each partial result is a prefix of the final one.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from plookup.app.serve.toolcalls import jsonscan


@dataclass(frozen=True)
class Call:
    name: str
    arguments: str  # JSON text of an object: where the format writes JSON, exactly the model's text of it


@dataclass(frozen=True)
class Parsed:
    content: str = ""
    reasoning: str = ""
    calls: tuple[Call, ...] = ()


@dataclass
class Section:
    """One call section read from the output: its complete calls, the call still being written
    (partial parses only), and where ordinary content resumes (None: the section runs to the end)."""

    calls: list[Call]
    end: int | None
    pending: Call | None = None


def held_back(text: str, markers: tuple[str, ...]) -> int:
    """Length of the longest tail of ``text`` that is a proper prefix of a marker: it may be the
    start of markup, so a partial parse must not show it yet."""
    best = 0
    for marker in markers:
        for k in range(min(len(marker) - 1, len(text)), best, -1):
            if marker.startswith(text[-k:]):
                best = k
                break
    return best


def json_call_args(text: str, start: int, partial: bool) -> tuple[str, int] | None:
    """The arguments object that starts at ``start``: (its text, its end), its text so far with
    end -1 while it is still being written (or cut off), or None when it is not an object."""
    if start >= len(text) or text[start] != "{":
        return ("", -1) if partial and start >= len(text) else None
    end = jsonscan.scan(text, start)
    if end == jsonscan.BAD:
        return None
    if end == jsonscan.MORE:
        return text[start:], -1
    return text[start:end], end


def object_text(value: object) -> str | None:
    """Arguments given as an object, or as a JSON string that holds one, as JSON text."""
    if isinstance(value, str):
        value = jsonscan.load_object(value)
    return json.dumps(value, ensure_ascii=False) if isinstance(value, dict) else None


def coerce_value(raw: str, schema: dict | None) -> object:
    """A parameter written as bare text (XML-style formats): kept as text where the tool's schema
    says string (or the text is not JSON), else read as JSON, so ``1`` becomes a number."""
    types = (schema or {}).get("type")
    types = types if isinstance(types, list) else [types]
    if "string" in types and len(types) == 1:
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        # Models trained on Python write its literals where the schema wants a JSON one.
        python = {"True": True, "False": False, "None": None}
        return python[raw.strip()] if types != [None] and raw.strip() in python else raw


@dataclass(frozen=True)
class ToolFormat:
    """A model family's tool-call syntax. ``args_as_objects``: its chat template wants assistant
    call arguments as objects; ``reasoning_open``: the prompt already opened the reasoning block
    (e.g. it ends in ``<think>\\n``); ``tools``: the offered tools, for formats whose argument values
    are bare text that the schema types."""

    args_as_objects: bool = False
    reasoning_open: bool = False
    tools: tuple = ()

    name: ClassVar[str] = "generic"
    starts: ClassVar[tuple[str, ...]] = ()  # literal markers where a call section begins
    think_tags: ClassVar[tuple[tuple[str, str], ...]] = (("<think>", "</think>"),)

    def bind(self, tools: list[dict] | None = None, prompt: str = "") -> ToolFormat:
        """This format for one request: the tools offered and the rendered prompt, whose end tells
        whether the model starts inside its reasoning block."""
        opened = any(prompt.rstrip().endswith(open_) for open_, _ in self.think_tags)
        return dataclasses.replace(self, tools=tuple(tools or ()), reasoning_open=opened)

    def schema_of(self, tool: str, param: str) -> dict | None:
        for t in self.tools:
            fn = t.get("function", t)
            if fn.get("name") == tool:
                return ((fn.get("parameters") or {}).get("properties") or {}).get(param)
        return None

    # ---------------------------------------------------------------- parsing

    def parse(self, text: str, partial: bool = False) -> Parsed:
        reasoning, pos = self._reasoning(text, partial)
        content: list[str] = []
        calls: list[Call] = []
        while pos is not None:
            pos = self._next(text, pos, partial, content, calls)
        return Parsed("".join(content).strip(), reasoning.strip(), tuple(calls))

    def _next(self, text: str, pos: int, partial: bool, content: list[str], calls: list[Call]) -> int | None:
        """Consume content up to the next call section and that section; the position to go on
        from, or None when the output (so far) is used up."""
        start, marker = self._find_start(text, pos, not content and not calls)
        if start < 0:
            rest = text[pos:]
            content.append(rest[: len(rest) - held_back(rest, self.starts)] if partial else rest)
            return None
        content.append(text[pos:start])
        section = self._section(text, start, marker, partial)
        if section is None:  # malformed: the marker was only text
            content.append(marker)
            return start + len(marker)
        calls.extend(section.calls)
        if section.pending is not None and partial:  # a final parse drops a call the output cut off
            calls.append(section.pending)
        return section.end

    def _find_start(self, text: str, pos: int, at_output_start: bool) -> tuple[int, str]:
        hits = [(i, m) for m in self.starts if (i := text.find(m, pos)) >= 0]
        return min(hits, key=lambda h: (h[0], -len(h[1]))) if hits else (-1, "")

    def _section(self, text: str, start: int, marker: str, partial: bool) -> Section | None:
        return None

    def _reasoning(self, text: str, partial: bool) -> tuple[str, int | None]:
        """The reasoning at the start of the output and where the rest begins (None: nothing
        after it yet)."""
        lead = len(text) - len(text.lstrip())
        for open_, close in self.think_tags:
            if text.startswith(open_, lead):
                return self._until_close(text, lead + len(open_), close, (), partial)
            if partial and not self.reasoning_open and open_.startswith(text[lead:]):
                return "", None  # could still become the opening tag
        if self.reasoning_open:
            closes = tuple(c for _, c in self.think_tags)
            return self._until_close(text, 0, closes, self.starts, partial)
        return "", 0

    def _until_close(self, text, start, closes, starts, partial) -> tuple[str, int | None]:
        """Reasoning from ``start`` to the first closing tag (or call marker when the prompt
        opened the block: a model may call a tool without closing it)."""
        closes = closes if isinstance(closes, tuple) else (closes,)
        hits = [(i, len(c)) for c in closes if (i := text.find(c, start)) >= 0]
        hits += [(i, 0) for m in starts if (i := text.find(m, start)) >= 0]
        if hits:
            i, skip = min(hits)
            return text[start:i], i + skip
        rest = text[start:]
        if partial:
            rest = rest[: len(rest) - held_back(rest, closes + starts)]
        return rest, None

    # ---------------------------------------------------------------- grammar and prompt

    def trigger_patterns(self) -> list[str]:
        return [re.escape(m).replace("\\ ", " ") for m in self.starts]

    def grammar(self, tools: list[dict], parallel: bool) -> str:
        raise NotImplementedError

    def render_messages(self, messages: list[dict], tools: list[dict] | None) -> list[dict]:
        return [self._render_message(m) for m in messages]

    def _render_message(self, message: dict) -> dict:
        message = copy.deepcopy(message)
        if message.get("role") != "assistant":
            return message
        if message.get("content") is None:
            message["content"] = ""
        for call in message.get("tool_calls") or ():
            fn = call.get("function") or {}
            if self.args_as_objects and isinstance(fn.get("arguments"), str):
                parsed = jsonscan.load_object(fn["arguments"])
                if parsed is not None:
                    fn["arguments"] = parsed
        return message


def deltas(previous: Parsed, current: Parsed, call_id: Callable[[int], str]) -> list[dict]:
    """OpenAI chat-stream ``delta`` dicts that take a client from ``previous`` to ``current``.
    Every tool-call delta names its call in full (index, id, type, name), since some clients
    (opencode's AI SDK) reject deltas that carry only an id."""
    out: list[dict] = []
    for key, before, now in (
        ("reasoning_content", previous.reasoning, current.reasoning),
        ("content", previous.content, current.content),
    ):
        if len(now) > len(before) and now.startswith(before):
            out.append({key: now[len(before) :]})
    for i, call in enumerate(current.calls):
        if i < len(previous.calls):
            sent = previous.calls[i].arguments
            if len(call.arguments) <= len(sent) or not call.arguments.startswith(sent):
                continue
            piece = call.arguments[len(sent) :]
        else:
            piece = call.arguments
        function = {"name": call.name, "arguments": piece}
        out.append({"tool_calls": [{"index": i, "id": call_id(i), "type": "function", "function": function}]})
    return out
