"""How each model family writes its tool calls, read the way llama.cpp's ``--jinja`` parsers
(common/chat.cpp, common/parsers/*.cpp) read them, and how its chat template is recognised.

Each family reads one call section starting at one of its markers; the shared scan in ``base``
does the rest. JSON-argument formats stream the arguments text as it arrives; formats whose
arguments are assembled from parts (XML-style parameters, Python call syntax) give them whole.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from typing import ClassVar

from plookup.app.serve.toolcalls import grammars, jsonscan
from plookup.app.serve.toolcalls.base import (
    Call,
    Parsed,
    Section,
    ToolFormat,
    coerce_value,
    held_back,
    json_call_args,
    object_text,
)

_WS = re.compile(r"\s*")
_NAME_STR = r'"((?:[^"\\]|\\.)*)"'


def _skip_ws(text: str, i: int) -> int:
    return _WS.match(text, i).end()


def _closing(text: str, i: int, close: str, partial: bool) -> int | None:
    """Past ``close`` at ``i`` (after whitespace); len(text) where the output ends first (a model
    stopped right before it); -1 while it may still come (partial); None when something else follows."""
    i = _skip_ws(text, i)
    if text.startswith(close, i):
        return i + len(close)
    if i >= len(text) or (partial and close.startswith(text[i:])):
        return -1 if partial else len(text)
    return None


def _json_call(text: str, start: int, partial: bool, header: re.Pattern) -> tuple[Call | None, int | None]:
    """A ``{"name": ..., "arguments": {...}}`` object at ``start``: (call, end) when complete,
    (call so far, -1) while written or cut off (only once the name is known), (None, None) when it is
    no call. The arguments text is the model's own wherever ``header`` finds it."""
    end = jsonscan.scan(text, start)
    if end == jsonscan.BAD:
        return None, None
    m = header.match(text, start)
    if end == jsonscan.MORE:
        if not m:
            return None, -1
        args = json_call_args(text, m.end(), partial=True)
        return (Call(json.loads(f'"{m.group(1)}"'), args[0]), -1) if args else (None, None)
    obj = jsonscan.load_object(text[start:end])
    if obj is None or not isinstance(obj.get("name"), str):
        return None, None
    raw = obj.get("arguments", obj.get("parameters", {}))
    if m:
        exact = json_call_args(text, m.end(), partial=False)
        args = exact[0] if exact else object_text(raw)
    else:
        args = object_text(raw)
    return (Call(obj["name"], args), end) if args is not None else (None, None)


def _pending_section(call: Call | None, end: int | None) -> Section | None:
    if end is None:
        return None
    return Section([], None, call)


@dataclass(frozen=True)
class Hermes(ToolFormat):
    """Hermes 2 Pro / Qwen2.5 / Qwen3: ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``.

    Small Qwen2.5 models often leave the tags out and write the call object alone, bare or in a
    ```json fence, as the whole answer or at its end after their reasoning in prose. Such an object
    is a call where it names an offered tool (so a request's tools must be bound) and nothing but
    whitespace follows it (llama.cpp's Hermes 2 Pro handler reads it at the answer's start only)."""

    name: ClassVar[str] = "hermes"
    starts: ClassVar[tuple[str, ...]] = ("<tool_call>",)
    _header: ClassVar[re.Pattern] = re.compile(r'\{\s*"name"\s*:\s*' + _NAME_STR + r'\s*,\s*"(?:arguments|parameters)"\s*:\s*')
    _fence: ClassVar[re.Pattern] = re.compile(r"```(?:json)?[ \t]*\n?\s*")
    _opening: ClassVar[re.Pattern] = re.compile(r"\{|```|`{1,2}\Z")  # (a tail of backticks may become a fence)
    _name_head: ClassVar[re.Pattern] = re.compile(r'\{\s*"name"\s*:\s*"([^"\\]*"?)')  # the name so far
    _head_prefix: ClassVar[re.Pattern] = re.compile(r'\{\s*(?:"(?:n(?:a(?:m(?:e(?:"\s*(?::\s*)?)?)?)?)?)?)?')

    def names(self) -> list[str]:
        return [t.get("function", t).get("name") for t in self.tools]

    def _find_start(self, text, pos, at_output_start):
        tagged = super()._find_start(text, pos, at_output_start)
        if not self.tools:
            return tagged
        end = tagged[0] if tagged[0] >= 0 else len(text)
        for m in self._opening.finditer(text, pos, end):
            if self._may_open_call(text, m.start()):
                return m.start(), text[m.start()]  # one character: where it is no call, only it is content
        return tagged

    def _may_open_call(self, text, i) -> bool:
        """Whether an untagged call to an offered tool may start at `i` (a ``{`` or a fence): its
        head so far agrees with one, or the text ends before it can tell."""
        if text[i] == "`":
            i = self._after_fence(text, i, partial=True)
            if i is None or i < 0:
                return i is not None  # -1: the text ends inside what may become a fence
            if text[i] != "{":
                return False
        rest = text[i:]
        if self._head_prefix.fullmatch(rest):  # it ends before the name begins
            return True
        head = self._name_head.match(rest)  # the name as far as it is written, its closing quote too
        return head is not None and any((n + '"').startswith(head.group(1)) for n in self.names())

    def _section(self, text, start, marker, partial):
        if marker in "{`":
            return self._untagged(text, start, partial)
        return self._tagged(text, start, marker, partial)

    def _untagged(self, text, start, partial):
        """The answer as one call object, bare or fenced. A stream holds it back until the answer
        ends, since only then is it known to be the whole answer; text that cannot become such a
        call is content at once."""
        fenced = text[start] == "`"
        i = self._after_fence(text, start, partial) if fenced else start
        if i is None:
            return None
        if i < 0:
            return Section([], None)
        if text[i] != "{":
            return None
        call, end = _json_call(text, i, partial, self._header)
        head = self._header.match(text, i)
        if end is None or (head is not None and json.loads(f'"{head.group(1)}"') not in self.names()):
            return None
        if partial:
            return Section([], None)
        if end < 0 or call is None or call.name not in self.names():
            return None
        after = _closing(text, end, "```", False) if fenced else end
        if after is None or text[after:].strip():
            return None
        return Section([call], len(text))

    def _after_fence(self, text, start, partial):
        """Where the object starts after the ```json fence at `start`; -1 while the text may still
        become such a fence; None where it is no fence (a ```python block, say)."""
        if partial and "```json".startswith(text[start:]):
            return -1
        m = self._fence.match(text, start)
        if m is None:
            return None
        if m.end() == len(text):
            return -1 if partial else None
        return m.end()

    def _tagged(self, text, start, marker, partial):
        call, end = _json_call(text, _skip_ws(text, start + len(marker)), partial, self._header)
        if end is None or end < 0:
            return _pending_section(call, end)
        after = _closing(text, end, "</tool_call>", partial)
        if after is None:
            return None
        return Section([], None, call) if after < 0 else Section([call], after)

    def grammar(self, tools, parallel):
        return grammars.hermes(tools, parallel)

    def trigger_patterns(self):
        # the tags, or an untagged call object from the name of one of the request's tools on: the
        # grammar then holds it to a whole call that ends the answer
        patterns = super().trigger_patterns()
        if self.tools:
            names = "|".join(re.escape(n) for n in self.names())
            patterns.append(r'((?:```(?:json)?\s*)?\{\s*"name"\s*:\s*"(?:' + names + r')")')
        return patterns


_PARAM = re.compile(r"<parameter=([^>\n]+)>\n?")
# A value ends at its closing tag when markup follows it, or where the model forgot the tag.
_VALUE_END = re.compile(r"\n?</parameter>\s*(?=<parameter=|\Z)|\n(?=<parameter=)|\n?\Z")


@dataclass(frozen=True)
class Qwen3Xml(ToolFormat):
    """Qwen3-Coder / Qwen3.5+: ``<tool_call>\\n<function=NAME>\\n<parameter=P>\\nVALUE\\n</parameter>\\n
    </function>\\n</tool_call>`` (the ``<tool_call>`` opener is sometimes left out)."""

    name: ClassVar[str] = "qwen3-xml"
    starts: ClassVar[tuple[str, ...]] = ("<tool_call>", "<function=")
    _function: ClassVar[re.Pattern] = re.compile(r"<function=([^>\n]+)>")

    def _section(self, text, start, marker, partial):
        i = _skip_ws(text, start + len(marker)) if marker == "<tool_call>" else start
        m = self._function.match(text, i)
        if not m:
            head = text[i:]
            could = "<function=".startswith(head) or re.fullmatch(r"<function=[^>\n]*", head)
            return Section([], None) if could else None  # a final parse: cut off at the opener
        call = Call(m.group(1).strip(), "")
        close = text.find("</function>", m.end())
        while close >= 0 and not re.match(r"\s*(?:</tool_call>|<tool_call>|<function=|\Z)", text[close + 11 :]):
            close = text.find("</function>", close + 1)
        if close < 0:
            return Section([], None, call) if partial else Section([], None)
        args = self._arguments(call.name, text[m.end() : close])
        if args is None:
            return None
        after = _closing(text, close + len("</function>"), "</tool_call>", partial)
        if after is None:  # no closing tag: a bare function block ends here
            after = close + len("</function>")
        if after < 0:
            return Section([], None, Call(call.name, ""))
        return Section([Call(call.name, args)], after)

    def _arguments(self, tool: str, body: str) -> str | None:
        values: dict = {}
        i = _skip_ws(body, 0)
        while i < len(body):
            m = _PARAM.match(body, i)
            if not m:
                return None
            end = _VALUE_END.search(body, m.end())
            stop = end.start() if end else len(body)
            name = m.group(1).strip()
            values[name] = coerce_value(body[m.end() : stop], self.schema_of(tool, name))
            i = _skip_ws(body, end.end() if end else len(body))
        return json.dumps(values, ensure_ascii=False)

    def grammar(self, tools, parallel):
        return grammars.qwen3_xml(tools, parallel)


@dataclass(frozen=True)
class Llama3(ToolFormat):
    """Llama 3.x: the whole answer is ``{"name": ..., "parameters": {...}}`` (maybe after
    ``<|python_tag|>``); Llama 4 also writes Python calls, ``[f(a=1), g(b="x")]``."""

    name: ClassVar[str] = "llama3"
    starts: ClassVar[tuple[str, ...]] = ("<|python_tag|>", "{", "[")
    think_tags: ClassVar[tuple] = ()
    _header: ClassVar[re.Pattern] = re.compile(
        r'\{\s*(?:"type"\s*:\s*"function"\s*,\s*)?"name"\s*:\s*' + _NAME_STR + r'\s*,\s*"(?:parameters|arguments)"\s*:\s*'
    )
    _pythonic_head: ClassVar[re.Pattern] = re.compile(r"\[\s*[A-Za-z_][\w.]*\s*\(")

    def _find_start(self, text, pos, at_output_start):
        # JSON and Python calls are only calls when they are the whole answer; the tag is a marker anywhere.
        i = _skip_ws(text, pos)
        if at_output_start and i < len(text) and text[i] in "{[":
            return i, text[i]
        j = text.find("<|python_tag|>", pos)
        return (j, "<|python_tag|>") if j >= 0 else (-1, "")

    def parse(self, text, partial=False):
        lead = text.lstrip()
        if partial and lead and "{[".find(lead[0]) < 0 and len(lead) < 14 and "<|python_tag|>".startswith(lead):
            return Parsed()
        return super().parse(text, partial)

    def _section(self, text, start, marker, partial):
        if marker == "[":
            return self._pythonic(text, start, partial)
        i = _skip_ws(text, start + len(marker)) if marker != "{" else start
        if i >= len(text):
            return Section([], None) if partial or marker != "{" else None
        call, end = _json_call(text, i, partial, self._header)
        if end is None or end < 0:
            return _pending_section(call, end)
        if text[end:].strip() and marker == "{":
            return None  # a JSON answer followed by prose is not a call
        return Section([call], end)

    def _pythonic(self, text, start, partial):
        if partial:
            head = text[start:]
            maybe = self._pythonic_head.match(head) or re.fullmatch(r"\[\s*(?:[A-Za-z_][\w.]*\s*)?", head)
            return Section([], None) if maybe else None
        calls = _python_calls(text[start:])
        return Section(calls, len(text)) if calls else None

    def grammar(self, tools, parallel):
        return grammars.llama3(tools, parallel)

    def trigger_patterns(self):
        return [r'\{\s*"name"', r"<\|python_tag\|>"]


def _python_calls(text: str) -> list[Call] | None:
    """``[f(a=1), g(b="x")]`` as calls, or None when it is anything else."""
    try:
        tree = ast.parse(text.strip(), mode="eval").body
        if not isinstance(tree, ast.List) or not tree.elts:
            return None
        calls = []
        for node in tree.elts:
            if not isinstance(node, ast.Call) or node.args or not isinstance(node.func, (ast.Name, ast.Attribute)):
                return None
            args = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords}
            calls.append(Call(ast.unparse(node.func), json.dumps(args, ensure_ascii=False)))
        return calls
    except (SyntaxError, ValueError, TypeError):
        return None


@dataclass(frozen=True)
class Mistral(ToolFormat):
    """Mistral / Ministral / Magistral / Devstral: ``[TOOL_CALLS]name[ARGS]{...}`` (v11+, maybe with
    ``[CALL_ID]id``), or ``[TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]`` (v3); reasoning
    in ``[THINK]...[/THINK]``."""

    name: ClassVar[str] = "mistral"
    starts: ClassVar[tuple[str, ...]] = ("[TOOL_CALLS]",)
    think_tags: ClassVar[tuple] = (("[THINK]", "[/THINK]"), ("<think>", "</think>"))
    _named: ClassVar[re.Pattern] = re.compile(r"([^\[\]{}\s]+)(?:\[CALL_ID\][^\[]*)?\[ARGS\]")
    _header: ClassVar[re.Pattern] = re.compile(r'\{\s*"name"\s*:\s*' + _NAME_STR + r'\s*,\s*"(?:arguments|parameters)"\s*:\s*')

    def _section(self, text, start, marker, partial):
        i = _skip_ws(text, start + len(marker))
        if i >= len(text):
            return Section([], None)
        if text[i] == "[":
            return self._array(text, i, partial)
        m = self._named.match(text, start + len(marker))
        if not m:
            could = partial and re.fullmatch(r"[^\[\]{}\s]*(?:\[[A-Z_]*\]?[^\[]*){0,2}", text[start + len(marker) :])
            return Section([], None) if could else None
        args = json_call_args(text, m.end(), partial)
        if args is None:
            return None
        call = Call(m.group(1), args[0])
        return Section([], None, call) if args[1] < 0 else Section([call], args[1])

    def _array(self, text, i, partial):
        end = jsonscan.scan(text, i)
        if end == jsonscan.BAD or (end == jsonscan.MORE and not partial):
            return None
        if end == jsonscan.MORE:
            return Section([], None)  # whole calls once the list is complete
        calls = []
        for item in json.loads(text[i:end]):
            args = object_text(item.get("arguments", {})) if isinstance(item, dict) else None
            if args is None or not isinstance(item.get("name"), str):
                return None
            calls.append(Call(item["name"], args))
        return Section(calls, end)

    def grammar(self, tools, parallel):
        return grammars.mistral(tools, parallel)


_DS_CALL = re.compile(
    r"<｜tool▁call▁begin｜>\s*(?:function<｜tool▁sep｜>([^\n<]+)\n```json\n|(?!function<｜tool▁sep｜>)([^<\n]+?)<｜tool▁sep｜>)"
)
_DSML_OPEN = re.compile(r"<｜DSML｜ ?(?:function_calls|tool_calls|calls)>")
_DSML_INVOKE = re.compile(r'\s*<｜DSML｜ ?invoke name="([^"]+)"\s*(/?)>')
_DSML_PARAM = re.compile(r'\s*<｜DSML｜ ?parameter name="([^"]+)"(?: string="(true|false)")?>')


@dataclass(frozen=True)
class DeepSeek(ToolFormat):
    """DeepSeek V3/R1 (``function<｜tool▁sep｜>NAME`` and a json fence), V3.1 (``NAME<｜tool▁sep｜>{...}``)
    and V3.2/V4 (the ``｜DSML｜`` XML-like blocks)."""

    name: ClassVar[str] = "deepseek"
    starts: ClassVar[tuple[str, ...]] = ("<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜DSML｜")
    variant: str = "v31"

    def _section(self, text, start, marker, partial):
        if marker == "<｜DSML｜":
            return self._dsml(text, start, partial)
        i = start + (len(marker) if marker == "<｜tool▁calls▁begin｜>" else 0)
        calls: list[Call] = []
        while True:
            i = _skip_ws(text, i)
            if text.startswith("<｜tool▁calls▁end｜>", i):
                return Section(calls, i + len("<｜tool▁calls▁end｜>"))
            m = _DS_CALL.match(text, i)
            if not m:
                return self._after_calls(text, i, calls)
            fenced = m.group(1) is not None
            name = (m.group(1) or m.group(2)).strip()
            args = json_call_args(text, m.end(), partial)
            if args is None:
                return Section(calls, i) if calls else None
            if args[1] < 0:
                return Section(calls, None, Call(name, args[0]))
            j = args[1]
            for tail in ("```", "<｜tool▁call▁end｜>") if fenced else ("<｜tool▁call▁end｜>",):
                after = _closing(text, j, tail, partial)
                if after is None:
                    return Section(calls, i) if calls else None
                if after < 0:
                    return Section(calls, None, Call(name, args[0]))
                j = after
            calls.append(Call(name, args[0]))
            i = j

    @staticmethod
    def _after_calls(text: str, i: int, calls: list[Call]) -> Section | None:
        """Where the calls stop without the closing marker: the output was cut (drop what is
        unfinished) or prose follows."""
        rest = text[i:]
        begin, end = "<｜tool▁call▁begin｜>", "<｜tool▁calls▁end｜>"
        cut = begin.startswith(rest) or end.startswith(rest) or (rest.startswith(begin) and "<｜tool▁call▁end｜>" not in rest)
        if cut:
            return Section(calls, None)
        return Section(calls, i) if calls else None

    def _dsml(self, text, start, partial):
        m = _DSML_OPEN.match(text, start)
        if not m:
            return Section([], None) if partial and len(text) - start < 24 and ">" not in text[start:] else None
        calls: list[Call] = []
        i = m.end()
        while True:
            inv = _DSML_INVOKE.match(text, i)
            if not inv:
                close = re.compile(r"\s*</｜DSML｜ ?(?:function_calls|tool_calls|calls)>").match(text, i)
                return Section(calls, close.end() if close else None)
            name, values = inv.group(1), {}
            i = inv.end()
            if not inv.group(2):
                while p := _DSML_PARAM.match(text, i):
                    end = re.compile(r"</｜DSML｜ ?parameter>").search(text, p.end())
                    if not end:
                        return Section(calls, None, Call(name, "") if partial else None)
                    raw = text[p.end() : end.start()]
                    schema = {"type": "string"} if p.group(2) == "true" else None
                    values[p.group(1)] = coerce_value(raw, schema or self.schema_of(name, p.group(1)))
                    i = end.end()
                close = re.compile(r"\s*</｜DSML｜ ?invoke>").match(text, i)
                if not close:
                    return Section(calls, None, Call(name, "") if partial else None)
                i = close.end()
            calls.append(Call(name, json.dumps(values, ensure_ascii=False)))

    def grammar(self, tools, parallel):
        return grammars.deepseek(tools, parallel, self.variant)


@dataclass(frozen=True)
class GptOss(ToolFormat):
    """gpt-oss (Harmony): messages ``<|channel|>analysis<|message|>...<|end|>`` (reasoning),
    ``final`` (content), and calls addressed ``to=functions.NAME`` with JSON bodies."""

    name: ClassVar[str] = "gpt-oss"
    starts: ClassVar[tuple[str, ...]] = ("<|channel|>", "<|start|>", " to=")
    think_tags: ClassVar[tuple] = ()
    # Where a message body ends; reasoning only at <|end|>, since it may mention the other tokens.
    _ends: ClassVar[dict[str, tuple[str, ...]]] = {
        "analysis": ("<|end|>", "<|start|>"),
        "other": ("<|end|>", "<|return|>", "<|call|>", "<|start|>"),
    }

    def parse(self, text, partial=False):
        out: dict[str, list] = {"reasoning": [], "content": [], "calls": []}
        pos: int | None = 0
        while pos is not None and pos < len(text):
            pos = self._message(text, pos, partial, out)
        return Parsed("".join(out["content"]).strip(), "".join(out["reasoning"]).strip(), tuple(out["calls"]))

    def _message(self, text, pos, partial, out) -> int | None:
        """Read the message at ``pos`` into ``out``; where the next one starts (None: no more)."""
        h = text.find("<|message|>", pos)
        if h < 0:
            return None  # header still being written, or cut off
        header, body = text[pos:h], h + len("<|message|>")
        recipient = re.search(r"to=([^\s<]+)", header)
        channel = re.search(r"<\|channel\|>\s*(\w+)", header)
        if recipient:
            return self._call(text, body, recipient.group(1), partial, out["calls"])
        kind = channel.group(1) if channel else ""
        ends = self._ends["analysis" if kind == "analysis" else "other"]
        hits = [(i, m) for m in ends if (i := text.find(m, body)) >= 0]
        end, marker = min(hits) if hits else (len(text), "")
        piece = text[body:end]
        if not hits and partial:
            piece = piece[: len(piece) - held_back(piece, ends)]
        target = {"analysis": "reasoning", "final": "content", "commentary": "content"}.get(kind)
        if target:
            out[target].append(piece)
        return self._next_header(text, end + len(marker)) if hits else None

    def _call(self, text, body, recipient, partial, calls) -> int | None:
        i = _skip_ws(text, body)
        args = json_call_args(text, i, partial)
        if args is None or not recipient.startswith("functions."):
            stop = text.find("<|start|>", body)  # not a function call: skip the message
            return stop if stop >= 0 else None
        if args[1] < 0:
            if partial:
                calls.append(Call(recipient[len("functions.") :], args[0]))
            return None
        calls.append(Call(recipient[len("functions.") :], args[0]))
        return self._next_header(text, args[1])

    @staticmethod
    def _next_header(text: str, i: int) -> int:
        for token in ("<|call|>", "<|end|>", "<|start|>", "assistant"):
            if text.startswith(token, i):
                i += len(token)
        return i

    def trigger_patterns(self):
        return [r"<\|channel\|>commentary to=functions\.", r" to=functions\."]

    def grammar(self, tools, parallel):
        return grammars.gpt_oss(tools, parallel)


@dataclass(frozen=True)
class Generic(ToolFormat):
    """A template without tool support: the system prompt asks for JSON, ``{"tool_calls": [...]}``
    or ``{"response": "..."}``, and an eager grammar holds the model to it."""

    name: ClassVar[str] = "generic"
    think_tags: ClassVar[tuple] = ()

    def parse(self, text, partial=False):
        i = _skip_ws(text, 0)
        if i >= len(text) or text[i] != "{":
            return Parsed(text.strip() if not partial or text.strip() else "")
        end = jsonscan.scan(text, i)
        if end == jsonscan.MORE and partial:
            return Parsed()
        obj = jsonscan.load_object(text[i:end]) if end > 0 else None
        parsed = _generic_answer(obj) if obj is not None else None
        if parsed is None:
            return Parsed(text.strip())
        tail = text[end:]
        return Parsed((parsed.content + tail).strip(), "", parsed.calls)

    def trigger_patterns(self):
        return []

    def grammar(self, tools, parallel):
        return grammars.generic(tools, parallel)

    def render_messages(self, messages, tools):
        rendered = [self._generic_message(m) for m in messages]
        if not tools:
            return rendered
        prompt = grammars.generic_system_prompt(tools)
        if rendered and rendered[0].get("role") == "system":
            rendered[0] = {**rendered[0], "content": f"{rendered[0].get('content') or ''}\n\n{prompt}".lstrip()}
            return rendered
        return [{"role": "system", "content": prompt}, *rendered]

    def _generic_message(self, message):
        message = self._render_message(message)
        if message.get("role") == "tool":
            body = {"tool_response": {"tool": message.get("name", ""), "id": message.get("tool_call_id", ""), "content": message.get("content")}}
            return {"role": "user", "content": json.dumps(body, ensure_ascii=False)}
        if message.get("role") == "assistant" and message.get("tool_calls"):
            calls = [_generic_call_json(c) for c in message["tool_calls"]]
            body = {"tool_calls": calls}
            if message.get("content"):
                body["content"] = message["content"]
            return {"role": "assistant", "content": json.dumps(body, ensure_ascii=False)}
        return message


def _generic_call_json(call: dict) -> dict:
    fn = call.get("function") or {}
    args = fn.get("arguments")
    args = jsonscan.load_object(args) if isinstance(args, str) else args
    out = {"name": fn.get("name", ""), "arguments": args if args is not None else {}}
    return {**out, "id": call["id"]} if call.get("id") else out


def _generic_answer(obj: dict) -> Parsed | None:
    if isinstance(obj.get("response"), str):
        return Parsed(obj["response"])
    raw = obj.get("tool_calls", [obj["tool_call"]] if isinstance(obj.get("tool_call"), dict) else None)
    if not isinstance(raw, list):
        return None
    calls = []
    for item in raw:
        args = object_text(item.get("arguments", {})) if isinstance(item, dict) else None
        if args is None or not isinstance(item.get("name"), str):
            return None
        calls.append(Call(item["name"], args))
    return Parsed("", "", tuple(calls))


def detect(template: str) -> ToolFormat:
    """The family whose markup the chat template source writes (the checks mirror llama.cpp's
    chat.cpp); generic where none matches. Templates that print call arguments with ``tojson`` or
    iterate them with ``items`` need them as objects."""
    wants_objects = bool(re.search(r"arguments\s*\|\s*(?:tojson|items)|arguments\.items\(\)|arguments is mapping", template))
    family = _family(template)
    return family(args_as_objects=wants_objects) if family is not DeepSeek else family(args_as_objects=wants_objects, variant=_deepseek_variant(template))


def _family(src: str) -> type[ToolFormat]:
    if "<|channel|>" in src and "<|message|>" in src:
        return GptOss
    if "tool▁calls▁begin" in src or ("dsml_token" in src and "DSML" in src):
        return DeepSeek
    if "[TOOL_CALLS]" in src:
        return Mistral
    if "<tool_call>" in src and "<function=" in src and "<parameter=" in src:
        return Qwen3Xml
    if "<tool_call>" in src:
        return Hermes
    if ("<|start_header_id|>" in src or "<|header_start|>" in src) and ("ipython" in src or "tools" in src):
        return Llama3
    return Generic


def _deepseek_variant(src: str) -> str:
    if "DSML" in src:
        return "dsml"
    return "v3" if "```json" in src else "v31"
