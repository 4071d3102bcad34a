"""GBNF grammars that hold a model to its family's call syntax once a call starts (llama.cpp's
lazy grammar: from the trigger's start to the end of the output), each call's arguments held to
its tool's JSON schema by llama_cpp's own schema converter.

One converter serves all tools of a grammar, each under its own rule prefix (``tool-<i>-``), so
the rules it shares (``string``, ``space``, ...) appear once and the tools' rules never collide.
"""

from __future__ import annotations

import copy
import json
import re

from llama_cpp.llama_grammar import SchemaConverter

_WS = "tc-ws ::= [ \\t\\n]{0,4}"


def _lit(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    return f'"{escaped}"'


def _until(stop: str) -> str:
    """Any text that does not contain ``stop`` (GBNF has no lookahead: each alternative is a
    partial match of ``stop`` followed by a character that breaks it)."""
    def cls(c: str) -> str:
        return "[^" + ("\\" + c if c in "\\]^-" else c.replace("\n", "\\n")) + "]"

    alts = [cls(stop[0])] + [f"{_lit(stop[:k])} {cls(stop[k])}" for k in range(1, len(stop))]
    return "( " + " | ".join(alts) + " )*"


def _functions(tools: list[dict]) -> list[tuple[str, dict]]:
    out = []
    for tool in tools:
        fn = tool.get("function", tool)
        out.append((fn["name"], fn.get("parameters") or {"type": "object"}))
    return out


# The largest length or count bound a grammar spells out. llama_cpp's converter writes a bound of n
# as n nested optional groups, and llama.cpp's grammar parser recurses once per level: Claude Code's
# Workflow tool (a string of maxLength 524288) overflowed the stack and killed the server. A larger
# bound is left out (the grammar allows more than the schema, never less).
MAX_BOUND = 256
_BOUNDS = ("minLength", "maxLength", "minItems", "maxItems")
_REPEAT = re.compile(r"\{\s*(\d+)\s*(?:,\s*(\d*)\s*)?\}")


def loosened(schema):
    """`schema` without the bounds over MAX_BOUND (nor a pattern that repeats more often)."""
    if isinstance(schema, list):
        return [loosened(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key in _BOUNDS and isinstance(value, int) and value > MAX_BOUND:
            continue
        if key == "pattern" and isinstance(value, str) and any(
                int(n) > MAX_BOUND for m in _REPEAT.finditer(value) for n in m.groups() if n):
            continue
        out[key] = loosened(value)
    return out


class _Grammar:
    """Rules of one grammar: the converter's (argument schemas) and the family's own."""

    def __init__(self) -> None:
        self._conv = SchemaConverter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
        self._rules: dict[str, str] = {}

    def schema(self, prefix: str, schema: dict) -> str:
        """The rule for JSON text that ``schema`` allows; any JSON object where the converter
        cannot convert the schema."""
        try:
            resolved = self._conv.resolve_refs(loosened(copy.deepcopy(schema)), prefix)
            return self._conv.visit(resolved, prefix)
        except Exception:  # the converter asserts and raises on schemas it does not support
            return self._conv.visit({"type": "object"}, prefix + "-any")

    def add(self, name: str, body: str) -> str:
        self._rules[name] = body
        return name

    def text(self) -> str:
        own = "\n".join(f"{name} ::= {body}" for name, body in self._rules.items())
        return f"{own}\n{_WS}\n{self._conv.format_grammar()}\n"


def _repeat(call: str, parallel: bool, sep: str = "tc-ws") -> str:
    return f"{call} ( {sep} {call} )*" if parallel else call


def _json_calls(g: _Grammar, tools: list[dict], args_key: str) -> str:
    """``"<name>", "<args_key>": {...}`` per tool: the inside of a ``{"name": ...}`` call object."""
    alts = []
    for i, (name, params) in enumerate(_functions(tools)):
        args = g.schema(f"tool-{i}-args", params)
        alts.append(g.add(f"fn-{i}", f'{_lit(json.dumps(name))} tc-ws "," tc-ws {_lit(json.dumps(args_key))} tc-ws ":" tc-ws {args}'))
    return g.add("call-obj", '"{" tc-ws "\\"name\\"" tc-ws ":" tc-ws ( ' + " | ".join(alts) + ' ) tc-ws "}"')


def hermes(tools: list[dict], parallel: bool) -> str:
    """Tagged calls, or one untagged call object (bare or in a ```json fence) as the whole answer."""
    g = _Grammar()
    g.add("root", _repeat("call", parallel) + ' | "```" "json"? tc-ws call-obj tc-ws "```" | call-obj')
    obj = _json_calls(g, tools, "arguments")
    g.add("call", f'"<tool_call>" tc-ws {obj} tc-ws "</tool_call>"')
    return g.text()


def generic(tools: list[dict], parallel: bool) -> str:
    g = _Grammar()
    text = g.schema("response-text", {"type": "string"})
    g.add("root", '"{" tc-ws ( calls | "\\"response\\"" tc-ws ":" tc-ws ' + text + ' ) tc-ws "}"')
    obj = _json_calls(g, tools, "arguments")
    if parallel:
        g.add("calls", f'"\\"tool_calls\\"" tc-ws ":" tc-ws "[" tc-ws {obj} ( tc-ws "," tc-ws {obj} )* tc-ws "]"')
    else:
        g.add("calls", f'"\\"tool_call\\"" tc-ws ":" tc-ws {obj}')
    return g.text()


def llama3(tools: list[dict], parallel: bool) -> str:
    g = _Grammar()
    obj = _json_calls(g, tools, "parameters")
    g.add("root", f'"<|python_tag|>"? {obj}')
    return g.text()


def mistral(tools: list[dict], parallel: bool) -> str:
    g = _Grammar()
    alts = [
        g.add(f"fn-{i}", f'{_lit(name + "[ARGS]")} {g.schema(f"tool-{i}-args", params)}')
        for i, (name, params) in enumerate(_functions(tools))
    ]
    g.add("call", '"[TOOL_CALLS]" ( ' + " | ".join(alts) + " )")
    g.add("root", _repeat("call", parallel, sep=""))
    return g.text()


def deepseek(tools: list[dict], parallel: bool, variant: str) -> str:
    if variant == "dsml":
        return _dsml(tools, parallel)
    g = _Grammar()
    alts = []
    for i, (name, params) in enumerate(_functions(tools)):
        args = g.schema(f"tool-{i}-args", params)
        head = f"function<｜tool▁sep｜>{name}\n```json\n" if variant == "v3" else f"{name}<｜tool▁sep｜>"
        tail = ' "\\n```"' if variant == "v3" else ""
        alts.append(g.add(f"fn-{i}", f"{_lit(head)} {args}{tail}"))
    g.add("call", '"<｜tool▁call▁begin｜>" ( ' + " | ".join(alts) + ' ) "<｜tool▁call▁end｜>"')
    g.add("root", f'"<｜tool▁calls▁begin｜>" {_repeat("call", parallel, sep="")} "<｜tool▁calls▁end｜>"')
    return g.text()


def _xml_params(g: _Grammar, i: int, params: dict, param) -> str:
    """The parameters of tool ``i`` in schema order, the optional ones optional."""
    props = params.get("properties") or {}
    required = set(params.get("required") or ())
    parts = []
    for k, (pname, pschema) in enumerate(props.items()):
        rule = g.add(f"fn-{i}-p-{k}", param(pname, pschema, f"tool-{i}-p-{k}"))
        parts.append(rule if pname in required else rule + "?")
    return " ".join(parts)


def qwen3_xml(tools: list[dict], parallel: bool) -> str:
    g = _Grammar()
    g.add("xml-text", _until("\n</parameter>"))

    def param(pname, pschema, prefix):
        value = "xml-text" if pschema.get("type") == "string" else g.schema(prefix, pschema)
        return f'{_lit(f"<parameter={pname}>" + chr(10))} {value} {_lit(chr(10) + "</parameter>" + chr(10))}'

    alts = []
    for i, (name, params) in enumerate(_functions(tools)):
        body = _xml_params(g, i, params, param)
        alts.append(g.add(f"fn-{i}", f'{_lit(f"<function={name}>" + chr(10))} {body} "</function>\\n"'))
    g.add("call", '"<tool_call>\\n" ( ' + " | ".join(alts) + ' ) "</tool_call>"')
    g.add("root", _repeat("call", parallel))
    return g.text()


def _dsml(tools: list[dict], parallel: bool) -> str:
    g = _Grammar()
    g.add("dsml-text", _until("</｜DSML｜parameter>"))

    def param(pname, pschema, prefix):
        if pschema.get("type") == "string":
            head, value = f'<｜DSML｜parameter name="{pname}" string="true">', "dsml-text"
        else:
            head, value = f'<｜DSML｜parameter name="{pname}" string="false">', g.schema(prefix, pschema)
        return f'{_lit(head)} {value} "</｜DSML｜parameter>\\n"'

    alts = []
    for i, (name, params) in enumerate(_functions(tools)):
        body = _xml_params(g, i, params, param)
        head = _lit('<｜DSML｜invoke name="' + name + '">\n')
        alts.append(g.add(f"fn-{i}", f'{head} {body} "</｜DSML｜invoke>\\n"'))
    g.add("call", "( " + " | ".join(alts) + " )")
    g.add("root", '"<｜DSML｜function_calls>\\n" ' + _repeat("call", parallel, sep="") + ' "</｜DSML｜function_calls>"')
    return g.text()


def gpt_oss(tools: list[dict], parallel: bool) -> str:
    g = _Grammar()
    channel_form, role_form = [], []
    for i, (name, params) in enumerate(_functions(tools)):
        args = g.schema(f"tool-{i}-args", params)
        channel_form.append(g.add(f"fn-{i}", f'{_lit(name)} " <|constrain|>json"? "<|message|>" {args}'))
        role_form.append(g.add(f"fn-{i}-role", f'{_lit(name + "<|channel|>commentary")} " <|constrain|>json"? "<|message|>" {args}'))
    g.add(
        "root",
        '"<|channel|>commentary to=functions." ( '
        + " | ".join(channel_form)
        + ' ) | " to=functions." ( '
        + " | ".join(role_form)
        + " )",
    )
    return g.text()


def generic_system_prompt(tools: list[dict]) -> str:
    """The instructions a template without tool support gets (as llama.cpp's generic handler
    gives them): the tools' schemas and the JSON answer shape."""
    listed = json.dumps([t.get("function", t) for t in tools], indent=2, ensure_ascii=False)
    return (
        "You can call these tools (JSON schemas):\n"
        f"```json\n{listed}\n```\n"
        "Answer with one JSON object and nothing else: either "
        '{"tool_calls": [{"name": "<tool name>", "arguments": {<arguments>}}]} to call tools, '
        'or {"response": "<your answer>"} to reply to the user.'
    )
