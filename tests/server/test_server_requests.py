"""`plookup serve` takes the request shapes OpenAI's clients send (issue 26's findings) and refuses a bad one
with a 400 naming the problem; CORS for browser pages; drafting from earlier requests by default.

In-process tests drive the app with Starlette's TestClient; the CLI's defaults (the memory, --cors-origins)
run `plookup serve` in a subprocess.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from fastapi.testclient import TestClient
from llama_cpp.llama_grammar import json_schema_to_gbnf

from plookup.app.serve.app import create_app

from conftest import serving
from support.prompts import COUNT_PROMPT, COUNT_TEXT

MODEL = "smol"
GREEDY = {"temperature": 0}
ORIGIN = "http://localhost:5173"
KEY = "s3cret-key"
COUNT_SCHEMA = {
    "type": "object",
    "properties": {"next": {"type": "integer"}, "name": {"type": "string"}},
    "required": ["next", "name"],
}
QUESTION = [{"role": "user", "content": "Count from 1 to 5 and give the next number as JSON."}]


@pytest.fixture(scope="module")
def client(smol):
    with TestClient(create_app(smol, MODEL)) as client:
        yield client


def chat(client, **body):
    return client.post("/v1/chat/completions", json={"max_tokens": 24, **GREEDY, **body})


def complete(client, **body):
    return client.post("/v1/completions", json={"max_tokens": 20, **GREEDY, **body})


def refusal(response) -> tuple[int, str, str]:
    error = response.json()["error"]
    return response.status_code, error["param"], error["message"]


# -- speculation per request


def test_speculative_bounds_this_requests_drafts_and_a_bad_field_is_400(client):
    """llama-server's `speculative` field on /v1 and /completion: n_max 0 decodes plainly, for that
    request only; a field out of range is a 400 naming it."""
    prompt = "The cat sat on the mat. " * 8
    drafting = complete(client, prompt=prompt, max_tokens=32).json()["usage"]["speculative"]
    plain = complete(client, prompt=prompt, max_tokens=32, speculative={"n_max": 0}).json()["usage"]["speculative"]
    assert drafting["drafted"] > 0 and plain["drafted"] == 0 and plain["forward_passes"] == 32
    again = client.post("/completion", json={"prompt": prompt, "n_predict": 32, "temperature": 0,
                                             "speculative": {"n_max": 0}}).json()
    assert again["timings"]["draft_n"] == 0 and again["tokens_predicted"] == 32
    for body, field in [({"n_max": -1}, "n_max"), ({"p_min": 2}, "p_min"), ({"draft": 1}, "draft")]:
        status, param, message = refusal(complete(client, prompt=prompt, speculative=body))
        assert status == 400 and "speculative" in param + message and field in param + message


# -- structured outputs


def test_json_schema_response_format_is_served_as_its_grammar(client):
    """OpenAI's structured outputs were a 400 (llama_cpp's schema knows json_object only): the schema
    is now the grammar llama_cpp's converter makes of it, the same answer as that grammar given."""
    schema = {"name": "count", "schema": COUNT_SCHEMA, "strict": True}
    response_format = {"type": "json_schema", "json_schema": schema}
    answer = chat(client, messages=QUESTION, response_format=response_format)
    assert answer.status_code == 200, answer.text
    content = answer.json()["choices"][0]["message"]["content"]
    grammar = json_schema_to_gbnf(json.dumps(COUNT_SCHEMA))
    assert content == chat(client, messages=QUESTION, grammar=grammar).json()["choices"][0]["message"]["content"]
    parsed = json.loads(content)  # 24 tokens are room enough for it
    assert list(parsed) == ["next", "name"] and isinstance(parsed["next"], int) and isinstance(parsed["name"], str)
    # Without a schema: any JSON, as OpenAI's json_object.
    anything = {"type": "json_schema", "json_schema": {"name": "any"}}
    content = chat(client, messages=QUESTION, response_format=anything).json()["choices"][0]["message"]["content"]
    assert content.lstrip()[0] in "{[\"-0123456789tfn"


@pytest.mark.parametrize("response_format, param", [
    ({"type": "json_schema", "json_schema": {"name": "bad", "schema": {"type": "foo"}}}, "response_format.json_schema.schema"),
    ({"type": "json_object", "schema": {"type": "foo"}}, "response_format.schema"),  # llama_cpp fell back to any JSON
])
def test_a_schema_that_makes_no_grammar_is_400_naming_it(client, response_format, param):
    status, named, message = refusal(chat(client, messages=QUESTION, response_format=response_format))
    assert (status, named) == (400, param)
    reason = "Unrecognized schema: {'type': 'foo'}"  # llama_cpp's converter's
    assert message == f"{param}: this JSON schema cannot be turned into a grammar: {reason}"


# -- message content as parts


def test_text_parts_are_joined_and_an_image_part_is_400(client):
    """A list of text parts was a 500; it is the parts' texts joined by newlines, in any role."""
    parts = [
        {"role": "system", "content": [{"type": "text", "text": "You answer briefly."}]},
        {"role": "user", "content": [{"type": "text", "text": "What is the capital"}, {"type": "text", "text": "of France?"}]},
    ]
    texts = [
        {"role": "system", "content": "You answer briefly."},
        {"role": "user", "content": "What is the capital\nof France?"},
    ]
    answer = chat(client, messages=parts)
    assert answer.status_code == 200, answer.text
    expected = chat(client, messages=texts).json()
    assert answer.json()["choices"][0]["message"] == expected["choices"][0]["message"]
    assert answer.json()["usage"]["prompt_tokens"] == expected["usage"]["prompt_tokens"]
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    with_image = [{"role": "user", "content": [{"type": "text", "text": "What is this?"}, image]}]
    assert refusal(chat(client, messages=with_image)) == (
        400, "messages.0.content.1", "messages.0.content.1: plookup serves text only, not a 'image_url' part"
    )


# -- fields OpenAI refuses


def test_missing_or_empty_messages_and_negative_max_tokens_are_400(client):
    """llama_cpp.server's schema takes a chat body without messages and any max_tokens: both were 200s."""
    status, param, message = refusal(client.post("/v1/chat/completions", json={"max_tokens": 4}))
    assert (status, param, message) == (400, "messages", "body.messages: Field required")
    status, param, message = refusal(chat(client, messages=[]))
    assert (status, param) == (400, "messages") and "at least 1 item" in message
    status, param, message = refusal(chat(client, messages=QUESTION, max_tokens=-5))
    negative = (400, "max_tokens", "body.max_tokens: Input should be greater than or equal to 0")
    assert (status, param, message) == negative
    assert refusal(complete(client, prompt=COUNT_PROMPT, max_tokens=-5)) == negative


# -- prompts as token ids, and lists of prompts


def test_a_prompt_of_token_ids_is_served(client, smol):
    tokens = smol.tokenize(COUNT_PROMPT.encode())  # with the BOS a text prompt gets
    answer = complete(client, prompt=tokens).json()
    assert answer["choices"][0]["text"] == COUNT_TEXT
    assert answer["usage"]["prompt_tokens"] == len(tokens)
    status, param, message = refusal(complete(client, prompt=[*tokens, 49152]))
    assert (status, param) == (400, "prompt")
    assert message == f"prompt: token id 49152 at position {len(tokens)} is outside the vocabulary of 49152"


def test_a_list_of_prompts_gets_a_choice_each(client, smol):
    short = "1, 2, 3,"
    alone = complete(client, prompt=short).json()
    tokens = smol.tokenize(COUNT_PROMPT.encode())
    for prompts in ([short, COUNT_PROMPT], [smol.tokenize(short.encode()), tokens]):
        answer = complete(client, prompt=prompts).json()
        assert [c["index"] for c in answer["choices"]] == [0, 1]
        assert [c["text"] for c in answer["choices"]] == [alone["choices"][0]["text"], COUNT_TEXT]
        assert answer["usage"]["prompt_tokens"] == alone["usage"]["prompt_tokens"] + len(tokens)
        assert answer["usage"]["completion_tokens"] == 40
        assert answer["usage"]["speculative"]["generated"] == 40  # the request's own stats count both
    assert refusal(complete(client, prompt=[short, COUNT_PROMPT], stream=True)) == (
        400, "prompt", "prompt: a streamed completion takes one prompt, not 2"
    )
    too_long = complete(client, prompt=[short, "word " * 3000])  # every prompt is measured before any work
    assert too_long.status_code == 400 and too_long.json()["error"]["code"] == "context_length_exceeded"


# -- malformed bodies


@pytest.mark.parametrize("body, message", [
    (b'{"prompt": "1, 2,", "max_tokens": ', "the request body is not valid JSON: Expecting value at character 34"),
    (b'{"prompt": "hi"} trailing', "the request body is not valid JSON: Extra data at character 17"),
    (b'{"prompt": "\xff"}', "the request body is not valid JSON: it is not UTF-8 text"),
    (b"[" * 100_000, "the request body is not valid JSON: it is nested too deeply"),  # a RecursionError inside
    (b"", "the request body is empty: a JSON object is expected"),
    (b"[1, 2]", "body: Input should be a valid dictionary or object to extract fields from"),
])
def test_a_malformed_body_is_400_naming_the_problem(client, body, message):
    for path in ("/v1/completions", "/v1/chat/completions"):
        response = client.post(path, content=body, headers={"Content-Type": "application/json"})
        assert response.status_code == 400, (path, response.text)
        assert response.json()["error"]["message"] == message
    assert complete(client, prompt=COUNT_PROMPT).json()["choices"][0]["text"] == COUNT_TEXT


# -- the command line: CORS, and drafting from earlier requests by default

# Free text: its answer is nowhere in its prompt, so only an earlier answer can draft it.
# Of six such prompts tried, this one's greedy answer had no near-tie that the memory's long verify batches
# moved on this build (SmolLM2 Q4_1, not exact here): the others' repeats diverged after 15-40 tokens.
ESSAY = {"model": MODEL, "prompt": "Once upon a time, in a small village,", "max_tokens": 48, **GREEDY}


def http(url: str, path: str, method: str = "GET", body: dict | None = None, headers: dict | None = None):
    """(status, headers, body) of one request."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"{url}{path}", data=data, method=method, headers=headers or {})
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def essay_twice(url: str, headers: dict) -> list[dict]:
    answers = []
    for _ in range(2):
        status, _, body = http(url, "/v1/completions", "POST", ESSAY, headers)
        assert status == 200, body
        answers.append(json.loads(body))
    return answers


@pytest.fixture(scope="module")
def without_memory():
    with serving(MODEL, "--no-memory") as (url, _):
        yield essay_twice(url, {})


def test_a_repeated_request_drafts_from_the_earlier_answer_by_default(without_memory):
    options = ("--cors-origins", f"{ORIGIN},http://127.0.0.1:3000", "--api-key", KEY)
    with serving(MODEL, *options) as (url, _):
        first, again = essay_twice(url, {"Authorization": f"Bearer {KEY}"})
        # A page from an allowed origin: the preflight passes before the key is asked for ...
        preflight = {"Origin": ORIGIN, "Access-Control-Request-Method": "POST",
                     "Access-Control-Request-Headers": "authorization, content-type"}
        status, headers, _ = http(url, "/v1/completions", "OPTIONS", headers=preflight)
        assert status == 200 and headers["access-control-allow-origin"] == ORIGIN
        assert "authorization" in headers["access-control-allow-headers"].lower()
        # ... and every answer carries the header, a 401 included, so the page can read the error.
        status, headers, _ = http(url, "/v1/models", headers={"Origin": ORIGIN})
        assert status == 401 and headers["access-control-allow-origin"] == ORIGIN
        status, headers, _ = http(url, "/v1/models", headers={"Origin": ORIGIN, "Authorization": f"Bearer {KEY}"})
        assert status == 200 and headers["access-control-allow-origin"] == ORIGIN
        # Another origin is refused its preflight and gets no header.
        other = dict(preflight, Origin="http://evil.test")
        status, headers, _ = http(url, "/v1/completions", "OPTIONS", headers=other)
        assert status == 400 and "access-control-allow-origin" not in {k.lower() for k in headers}
    # Greedy text unchanged by where the drafts came from: each call against the same call of a server
    # without the memory (a repeated call finds its prompt cached, whose last row may round otherwise).
    text = lambda answer: answer["choices"][0]["text"]  # noqa: E731
    assert (text(first), text(again)) == (text(without_memory[0]), text(without_memory[1]))
    from_memory = [a["usage"]["speculative"]["accepted_from_memory"] for a in (first, again, *without_memory)]
    assert from_memory[0] == from_memory[2] == from_memory[3] == 0
    assert from_memory[1] >= 36  # of 48 tokens (41 measured): the earlier answer, drafted whole
    passes = [a["usage"]["speculative"]["forward_passes"] for a in (again, without_memory[1])]
    assert passes[0] * 3 < passes[1]


def test_a_preflight_is_answered_as_llama_server_answers_it_by_default(smol):
    """llama-server's default (--cors-origins "*", credentials on): a page from any origin gets its
    preflight answered before the key is asked for, its origin echoed (llama.cpp's
    tools/server/tests/unit/test_security.py); `cors_origins=()` keeps it same-origin only."""
    preflight = {"Origin": "web.mydomain.fr", "Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "Authorization"}
    with TestClient(create_app(smol, MODEL, api_key=KEY)) as client:
        response = client.options("/completions", headers=preflight)
        assert response.status_code == 200
        assert response.headers["access-control-allow-origin"] == "web.mydomain.fr"
        assert response.headers["access-control-allow-credentials"] == "true"
        assert "POST" in response.headers["access-control-allow-methods"]
        assert "authorization" in response.headers["access-control-allow-headers"].lower()
        answer = client.get("/v1/models", headers={"Origin": "web.mydomain.fr"})
        assert answer.status_code == 401 and answer.headers["access-control-allow-origin"] == "web.mydomain.fr"
    with TestClient(create_app(smol, MODEL, api_key=KEY, cors_origins=("localhost",))) as client:
        local = client.options("/completions", headers=dict(preflight, Origin="http://127.0.0.1:3000"))
        assert local.status_code == 200 and local.headers["access-control-allow-origin"] == "http://127.0.0.1:3000"
        other = client.options("/completions", headers=dict(preflight, Origin="http://localhost.evil.com"))
        assert "access-control-allow-origin" not in other.headers
    with TestClient(create_app(smol, MODEL, api_key=KEY, cors_origins=())) as client:
        response = client.options("/v1/completions", headers=preflight)
        assert response.status_code == 401 and "access-control-allow-origin" not in response.headers


def test_serve_keeps_a_bounded_memory_unless_told_not_to(tmp_path):
    from plookup.app.cli import build_parser
    from plookup.app.options import open_memory

    def memory(*options):
        return open_memory(build_parser().parse_args(["serve", *options]), "unused.gguf")

    assert memory().max_tokens == 1 << 20 and len(memory()) == 0
    assert memory("--memory-tokens", "5000").max_tokens == 5000
    assert memory("--no-memory") is None and memory("--drafter", "ngram") is None
    with pytest.raises(ValueError, match="--no-memory turns the memory off"):
        memory("--no-memory", "--memory", str(tmp_path / "m.npz"))
    assert build_parser().parse_args(["serve"]).cors_origins == ("*",)  # llama-server's default
    assert build_parser().parse_args(["serve", "--cors-origins", "none"]).cors_origins == ()
    given = build_parser().parse_args(["serve", "--cors-origins", f"{ORIGIN}/, http://127.0.0.1:3000"])
    assert given.cors_origins == (ORIGIN, "http://127.0.0.1:3000")
    # plookup generate keeps none unless --memory PATH, as before.
    assert open_memory(build_parser().parse_args(["generate", "-p", "x"]), "unused.gguf") is None
