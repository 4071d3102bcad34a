"""Tool-call parsing per model family (plookup.app.serve.toolcalls): whole and streamed outputs,
stream deltas, grammars, template detection and message preparation; then canitoolcall's recorded
outputs, whose pass counts per family are pinned so that a regression fails."""

from __future__ import annotations

import collections
import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plookup.app.serve.toolcalls import (
    Call,
    DeepSeek,
    Generic,
    GptOss,
    Hermes,
    Llama3,
    Mistral,
    Parsed,
    Qwen3Xml,
    deltas,
    detect,
)

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        },
    },
}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
TOOLS = [WEATHER, TIME]

# Outputs as each family writes them (shapes from llama.cpp's tests/test-chat.cpp and canitoolcall).
SAMPLES = {
    Hermes(): [
        'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n</tool_call>',
        '<think>\nNeed two calls.\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich"}}\n'
        '</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>',
        'before<tool_call>{"name": "get_weather", "arguments": {"city": "a \\"b\\" <tool_call>"}}</tool_call>after',
        "Just text, with a < sign and <b>tags</b>.",
    ],
    Qwen3Xml(): [
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n"
        "</function>\n</tool_call>",
        "Sure.<tool_call>\n<function=get_time>\n</function>\n</tool_call>\n<tool_call>\n<function=get_weather>\n"
        "<parameter=city>\nLyon\n</parameter>\n</function>\n</tool_call>",
    ],
    Llama3(): [
        '{"name": "get_weather", "parameters": {"city": "Paris", "days": 1}}',
        '<|python_tag|>{"name": "get_time", "parameters": {}}',
        '{"capital": "Paris"}',
    ],
    Mistral(): [
        '[THINK]Weather.[/THINK]Checking.[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_time[ARGS]{}',
        '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Oslo"}}]',
    ],
    DeepSeek(): [
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
        '{"city": "Paris"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
        '<think>hm</think>Ok.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Rome"}'
        "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        '\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name="get_weather">\n<｜DSML｜parameter name="city" string="true">'
        'Paris</｜DSML｜parameter>\n<｜DSML｜parameter name="days" string="false">2</｜DSML｜parameter>\n</｜DSML｜invoke>\n'
        "</｜DSML｜function_calls>",
    ],
    GptOss(): [
        "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
        'to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}',
        "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>Hello there!",
    ],
    Generic(): [
        '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}',
        '{"response": "Hi!"}',
        "plain text",
    ],
}
ALL_SAMPLES = [(fmt, text) for fmt, texts in SAMPLES.items() for text in texts]
SAMPLE_IDS = [f"{fmt.name}-{i}" for i, (fmt, _) in enumerate(ALL_SAMPLES)]


def _is_prefix(part: Parsed, whole: Parsed) -> bool:
    """``part`` is what a stream could have shown on the way to ``whole``."""
    if not (whole.content.startswith(part.content) and whole.reasoning.startswith(part.reasoning)):
        return False
    if len(part.calls) > len(whole.calls):
        return False
    for k, call in enumerate(part.calls):
        final = whole.calls[k]
        last = k == len(part.calls) - 1
        if call.name != final.name or not (final.arguments.startswith(call.arguments) if last else call == final):
            return False
    return True


def _replay(fmt, text: str, cuts: list[int]) -> Parsed:
    """What an OpenAI client holds after the deltas of partial parses at ``cuts`` and the final parse."""
    content = reasoning = ""
    calls: dict[int, list[str]] = {}
    previous = Parsed()
    for current in [fmt.parse(text[:i], partial=True) for i in cuts] + [fmt.parse(text)]:
        for delta in deltas(previous, current, lambda i: f"call_{i}"):
            content += delta.get("content", "")
            reasoning += delta.get("reasoning_content", "")
            for tc in delta.get("tool_calls", ()):
                slot = calls.setdefault(tc["index"], [tc["function"]["name"], ""])
                slot[1] += tc["function"]["arguments"]
        previous = current
    return Parsed(content, reasoning, tuple(Call(n, a) for n, a in (calls[k] for k in sorted(calls))))


# --------------------------------------------------------------------------- hermes (Qwen2.5)


def test_hermes_calls_content_and_reasoning():
    fmt = Hermes()
    got = fmt.parse(SAMPLES[fmt][1])
    assert got.reasoning == "Need two calls."
    assert got.content == ""
    assert got.calls == (Call("get_weather", '{"city": "Zürich"}'), Call("get_time", "{}"))
    assert fmt.parse(SAMPLES[fmt][0]).content == "Let me check."
    assert fmt.parse(SAMPLES[fmt][2]).content == "beforeafter"


def test_hermes_arguments_keep_the_models_text():
    text = '<tool_call>\n{"name": "f", "arguments": {"b":1,  "a" : [1, 2]}}\n</tool_call>'
    assert Hermes().parse(text).calls == (Call("f", '{"b":1,  "a" : [1, 2]}'),)


def test_hermes_accepts_parameters_and_string_arguments():
    fmt = Hermes()
    by_parameters = fmt.parse('<tool_call>{"name": "f", "parameters": {"x": 1}}</tool_call>')
    as_string = fmt.parse('<tool_call>{"name": "f", "arguments": "{\\"x\\": 1}"}</tool_call>')
    assert by_parameters.calls == (Call("f", '{"x": 1}'),)
    assert json.loads(as_string.calls[0].arguments) == {"x": 1}


@pytest.mark.parametrize(
    "text",
    ["<tool_call>not valid json</tool_call>", '<tool_call>{"arguments": {}}</tool_call>', '<tool_call>{"name": "f", "arguments": 3}</tool_call>'],
)
def test_malformed_call_stays_content(text):
    assert Hermes().parse(text) == Parsed(content=text)


def test_cut_off_call_is_dropped_and_earlier_calls_kept():
    text = '<tool_call>\n{"name": "a", "arguments": {}}\n</tool_call>\n<tool_call>\n{"name": "b", "arguments": {"q": "ca'
    assert Hermes().parse(text) == Parsed(calls=(Call("a", "{}"),))


def test_prompt_that_opened_reasoning():
    fmt = Hermes().bind(TOOLS, "<|im_start|>assistant\n<think>\n")
    assert fmt.parse("Thinking.\n</think>\n\nHi").reasoning == "Thinking."
    assert fmt.parse("Still thinking", partial=True) == Parsed(reasoning="Still thinking")


UNTAGGED = [
    ('```json\n{\n  "name": "get_weather",\n  "arguments": {\n    "city": "Paris"\n  }\n}\n```', True),
    ('{"name": "get_weather", "arguments": {"city": "Paris"}}', True),
    ('```\n{"name": "get_time", "arguments": {}}\n```\n', True),
    ('{"name": "get_weather", "arguments": {"city": "Paris"}} and then some prose', False),
    ('Step 1: compare.\nTherefore, the final answer is:\n{"name": "get_weather", "arguments": {"city": "Paris"}}', True),
    ('Use `get_weather` like ``this``: ```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```', True),
    ('A dict {"a": 1} and {"name": "other", "x": {}} then ``', False),
    ('```json\n{"name": "delete_everything", "arguments": {}}\n```', False),  # not an offered tool
    ('```python\nprint(1)\n```', False),
    ('{"city": "Paris"}', False),
    ('`code` first', False),
]


@pytest.mark.parametrize("text, called", UNTAGGED)
def test_hermes_untagged_call_is_the_whole_answer_naming_a_tool(text, called):
    """Qwen2.5-Coder-0.5B answers ``tool_choice: auto`` with the call object alone, often fenced, or
    ends its prose with one: a call where nothing follows it and it names an offered tool, else
    content; a stream shows it at the end (only then is it known to end the answer), and never
    shows text it takes back."""
    fmt = Hermes().bind(TOOLS)
    whole = fmt.parse(text)
    if called:
        assert whole.content == text[: text.find("{") if "`" not in text else text.find("```")].strip()
        assert len(whole.calls) == 1
        assert json.loads(whole.calls[0].arguments) == {"city": "Paris"} or whole.calls[0].name == "get_time"
    else:
        assert whole == Parsed(content=text.strip())
    for i in range(len(text) + 1):
        assert _is_prefix(fmt.parse(text[:i], partial=True), whole), i
    assert _replay(fmt, text, list(range(0, len(text), 3))) == whole
    assert Hermes().parse(text).calls == ()  # unbound: no tool named, no untagged call


def test_hermes_untagged_trigger_names_the_tools():
    patterns = Hermes().bind(TOOLS).trigger_patterns()
    assert patterns[0] == "<tool_call>"
    # llama.cpp searches the text for a pattern; the grammar starts at its first group
    found = re.search(patterns[1], 'Sure:\n```json\n{\n  "name": "get_weather", "arg')
    assert found and found.start(1) == len("Sure:\n")
    assert re.search(patterns[1], '<think>hm</think>\n{"name": "get_time"')
    assert not re.search(patterns[1], '{"name": "rm"') and not re.search(patterns[1], '{"name": "get_weathe')


def test_partial_hermes_streams_arguments_and_holds_markers():
    fmt = Hermes()
    assert fmt.parse("Hello <tool_", partial=True) == Parsed(content="Hello")
    assert fmt.parse("<thi", partial=True) == Parsed()
    got = fmt.parse('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa', partial=True)
    assert got.calls == (Call("get_weather", '{"city": "Pa'),)
    assert fmt.parse('<tool_call>\n{"name": "get_wea', partial=True).calls == ()


# --------------------------------------------------------------------------- other families


def test_families_parse_their_samples():
    assert Qwen3Xml().parse(SAMPLES[Qwen3Xml()][0]).calls == (Call("get_weather", '{"city": "Paris", "days": 3}'),)
    typed = Qwen3Xml().bind(TOOLS).parse("<tool_call>\n<function=get_weather>\n<parameter=city>\n42\n</parameter>\n</function>\n</tool_call>")
    assert typed.calls == (Call("get_weather", '{"city": "42"}'),)
    assert Llama3().parse(SAMPLES[Llama3()][0]).calls == (Call("get_weather", '{"city": "Paris", "days": 1}'),)
    assert Llama3().parse(SAMPLES[Llama3()][2]) == Parsed(content='{"capital": "Paris"}')
    assert [c.name for c in Llama3().parse("[get_weather(city='LA'), get_time()]").calls] == ["get_weather", "get_time"]
    mistral = Mistral().parse(SAMPLES[Mistral()][0])
    assert (mistral.reasoning, mistral.content, [c.name for c in mistral.calls]) == ("Weather.", "Checking.", ["get_weather", "get_time"])
    for text in SAMPLES[DeepSeek()]:
        assert DeepSeek().parse(text).calls[0].name == "get_weather"
    assert json.loads(DeepSeek().parse(SAMPLES[DeepSeek()][2]).calls[0].arguments) == {"city": "Paris", "days": 2}
    oss = GptOss().parse(SAMPLES[GptOss()][0])
    assert (oss.reasoning, oss.calls) == ("Need weather.", (Call("get_weather", '{"city": "Paris"}'),))
    assert GptOss().parse(SAMPLES[GptOss()][1]) == Parsed(content="Hello there!", reasoning="Easy.")
    assert Generic().parse('{"response": "Hi!"}') == Parsed(content="Hi!")
    assert Generic().parse('{"tool_call": {"name": "f", "arguments": {}}}').calls == (Call("f", "{}"),)


# --------------------------------------------------------------------------- streaming


@pytest.mark.parametrize(("fmt", "text"), ALL_SAMPLES, ids=SAMPLE_IDS)
def test_every_partial_parse_is_a_prefix_of_the_final_one(fmt, text):
    whole = fmt.parse(text)
    for i in range(len(text) + 1):
        part = fmt.parse(text[:i], partial=True)
        assert _is_prefix(part, whole), (i, text[:i], part, whole)
    assert _replay(fmt, text, list(range(1, len(text)))) == whole


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(ALL_SAMPLES), st.lists(st.integers(min_value=0, max_value=400), max_size=30))
def test_deltas_over_any_chunking_rebuild_the_parse(sample, cuts):
    fmt, text = sample
    cuts = sorted({c for c in cuts if c <= len(text)})
    assert _replay(fmt, text, cuts) == fmt.parse(text)


def test_every_tool_call_delta_names_its_call():
    previous = Parsed(calls=(Call("f", '{"a"'),))
    current = Parsed(content="x", calls=(Call("f", '{"a": 1}'), Call("g", "")))
    got = deltas(previous, current, lambda i: f"id{i}")
    assert got[0] == {"content": "x"}
    assert got[1:] == [
        {"tool_calls": [{"index": 0, "id": "id0", "type": "function", "function": {"name": "f", "arguments": ": 1}"}}]},
        {"tool_calls": [{"index": 1, "id": "id1", "type": "function", "function": {"name": "g", "arguments": ""}}]},
    ]
    assert deltas(current, current, str) == []


# --------------------------------------------------------------------------- grammars


@pytest.mark.parametrize("fmt", [Hermes(), Generic(), Qwen3Xml(), Llama3(), Mistral(), DeepSeek(), DeepSeek(variant="v3"), DeepSeek(variant="dsml"), GptOss()], ids=lambda f: f"{f.name}-{getattr(f, 'variant', '')}")
@pytest.mark.parametrize("parallel", [False, True])
def test_grammar_names_each_tool_and_has_a_root(fmt, parallel):
    grammar = fmt.grammar(TOOLS, parallel)
    rules = dict(line.split(" ::= ", 1) for line in grammar.strip().splitlines())
    assert "root" in rules
    assert all(name in grammar for name in ("get_weather", "get_time"))
    bare = (re.sub(r'"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]', " ", body) for body in rules.values())
    referenced = {w for body in bare for w in re.findall(r"[A-Za-z][\w-]*", body)}
    assert referenced <= set(rules), referenced - set(rules)


def test_hermes_grammar_shape():
    grammar = Hermes().grammar([WEATHER], parallel=False)
    assert 'root ::= call | "```" "json"? tc-ws call-obj tc-ws "```" | call-obj\n' in grammar
    assert '"<tool_call>" tc-ws' in grammar and '"</tool_call>"' in grammar
    assert '"\\"get_weather\\"" tc-ws "," tc-ws "\\"arguments\\""' in grammar


def test_unconvertible_schema_gets_any_object():
    odd = {"type": "function", "function": {"name": "odd", "parameters": {"$ref": "https://example.com/x.json"}}}
    grammar = Hermes().grammar([odd], parallel=False)
    assert "tool-0-args-any" in grammar


def test_triggers():
    assert Hermes().trigger_patterns() == ["<tool_call>"]
    assert Mistral().trigger_patterns() == [r"\[TOOL_CALLS\]"]
    assert Generic().trigger_patterns() == []


# --------------------------------------------------------------------------- templates


@pytest.mark.parametrize(
    ("source", "family"),
    [
        ("{{- '<tool_call>\\n' }}{{ tool_call.arguments | tojson }}", "hermes"),
        ("<tool_call>\n<function=' ~ name ~ '>\n<parameter=' ~ k", "qwen3-xml"),
        ("<|start_header_id|>ipython<|end_header_id|>", "llama3"),
        ("[AVAILABLE_TOOLS][TOOL_CALLS]", "mistral"),
        ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>", "deepseek"),
        ("<|start|>assistant<|channel|>final<|message|>", "gpt-oss"),
        ("{% for m in messages %}{{ m.content }}{% endfor %}", "generic"),
    ],
)
def test_detect(source, family):
    assert detect(source).name == family


def test_render_messages_turns_argument_strings_into_objects():
    fmt = detect("<tool_call>{{ tool_call.arguments|tojson }}")
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}
    messages = [{"role": "assistant", "content": None, "tool_calls": [call]}]
    rendered = fmt.render_messages(messages, TOOLS)
    assert rendered[0]["content"] == ""
    assert rendered[0]["tool_calls"][0]["function"]["arguments"] == {"x": 1}
    assert messages[0]["tool_calls"][0]["function"]["arguments"] == '{"x": 1}'  # the caller's copy is untouched
    assert Hermes().render_messages(messages, TOOLS)[0]["tool_calls"][0]["function"]["arguments"] == '{"x": 1}'


def test_generic_render_lists_tools_and_shows_calls_as_text():
    call = {"id": "c1", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Time?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "12:00"},
    ]
    rendered = Generic().render_messages(messages, TOOLS)
    assert [m["role"] for m in rendered] == ["system", "user", "assistant", "user"]
    assert rendered[0]["content"].startswith("Be brief.") and '"get_weather"' in rendered[0]["content"]
    assert '"tool_calls"' in rendered[0]["content"] and '"response"' in rendered[0]["content"]
    assert json.loads(rendered[2]["content"]) == {"tool_calls": [{"name": "get_time", "arguments": {}, "id": "c1"}]}
    assert json.loads(rendered[3]["content"])["tool_response"]["content"] == "12:00"
    assert Generic().render_messages([{"role": "user", "content": "x"}], TOOLS)[0]["role"] == "system"


# --------------------------------------------------------------------------- canitoolcall


FAMILIES = {"qwen3-hermes": Hermes, "qwen3-xml": Qwen3Xml, "llama": Llama3, "mistral": Mistral, "deepseek": DeepSeek, "gpt-oss": GptOss}
# Fixtures that pass every check on the whole output, and whose 1- and 3-character streams rebuild
# that same parse. Most misses are outputs cut off inside a call: the stream already showed the
# call's start, which the final parse then drops (canitoolcall wants no call for cut-off output).
PASSING = {"qwen3-hermes": 45, "qwen3-xml": 53, "llama": 31, "mistral": 46, "deepseek": 76, "gpt-oss": 50}


def _prompt(fixture, family) -> str:
    if fixture.generation_prompt is not None:
        return fixture.generation_prompt
    models = family.reference_models if family else ()
    return next((m.default_generation_prompt or "" for m in models if m.repo == fixture.models[0]), "")


def _conforms(fixture, family) -> bool:
    from canitoolcall.pytest_plugin import assert_conforms
    from canitoolcall.results import ParsedToolCall, ParseResult

    fmt = FAMILIES[fixture.family]().bind(fixture.tools, _prompt(fixture, family))
    whole = fmt.parse(fixture.raw_output)
    result = ParseResult(whole.content or None, whole.reasoning or None, tuple(ParsedToolCall(c.name, c.arguments) for c in whole.calls))
    try:
        assert_conforms(fixture, result, family=family)
    except AssertionError:
        return False
    text = fixture.raw_output
    return all(_replay(fmt, text, list(range(size, len(text), size))) == whole for size in (1, 3))


def test_canitoolcall_fixtures():
    fixtures = pytest.importorskip("canitoolcall.fixtures", reason="canitoolcall is not installed (pip install canitoolcall)")
    from canitoolcall.pytest_plugin import family_for

    passed = collections.Counter()
    for fixture in fixtures.load_fixtures(families=list(FAMILIES)):
        passed[fixture.family] += _conforms(fixture, family_for(fixture))
    assert dict(passed) == PASSING


def test_a_huge_length_bound_is_left_out_of_the_grammar():
    """Claude Code's Workflow tool: a string of maxLength 524288, which llama_cpp's converter wrote
    as that many nested groups (4.2 MB, a stack overflow in llama.cpp's parser). Bounds up to
    MAX_BOUND stay."""
    from plookup.app.serve.toolcalls.grammars import MAX_BOUND

    workflow = {"type": "function", "function": {"name": "Workflow", "parameters": {
        "type": "object", "required": ["script"], "properties": {
            "script": {"type": "string", "maxLength": 524288},
            "steps": {"type": "array", "items": {"type": "string", "pattern": "^a{1,100000}$"}, "maxItems": 70000},
            "tag": {"type": "string", "maxLength": 3},
        }}}}
    grammar = Hermes().grammar([workflow], parallel=False)
    assert len(grammar) < 20_000
    assert grammar.count("(") < 200
    bounded = Hermes().grammar([{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"s": {"type": "string", "maxLength": MAX_BOUND}}}}}], parallel=False)
    assert len(bounded) > len(Hermes().grammar([{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"s": {"type": "string"}}}}}], parallel=False))


def test_response_format_and_json_schema_leave_huge_bounds_out_too():
    from plookup.app.serve.controls import json_schema_grammar
    from plookup.app.serve.requests import response_format_grammar

    schema = {"type": "object", "properties": {"s": {"type": "string", "maxLength": 524288}}}
    structured = response_format_grammar({"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
    assert len(structured._grammar) < 5_000 and len(json_schema_grammar(schema)) < 5_000
