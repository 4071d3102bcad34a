"""A chat request is rendered and tokenized once (issue 45, item 1): admission learns its prompt
from llama_cpp's own chat handler, stopped where that handler hands the prompt's tokens to
create_completion, and the generation runs those arguments, not a second templating pass. Agents
send prompts of 6,000-18,000 tokens; the answer stays the model's chat answer, whole and streamed
(in process, on SmolLM2, with Starlette's TestClient)."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from plookup.app.serve.app import create_app

MODEL = "smol"
MARK = "Zanzibar quokka"  # in the user's message only: a tokenized text holding it is the prompt
MESSAGES = [{"role": "user", "content": f"Write the words {MARK} three times."}]
GREEDY = {"temperature": 0, "max_tokens": 8}

# Each chat route's body for MESSAGES, greedy and short.
ROUTES = {
    "/v1/chat/completions": {"messages": MESSAGES, **GREEDY},
    "/v1/responses": {"model": MODEL, "input": MESSAGES, "temperature": 0, "max_output_tokens": 8},
    "/v1/messages": {"model": MODEL, "messages": MESSAGES, "temperature": 0, "max_tokens": 8},
}


@pytest.fixture(scope="module")
def client(smol):
    with TestClient(create_app(smol, MODEL)) as client:
        yield client


@pytest.fixture
def prompts(smol, monkeypatch) -> list:
    """The texts holding MARK that the model tokenized: each is one rendering of the prompt."""
    tokenized = []
    tokenize = smol.tokenize

    def counted(text: bytes, *args, **kwargs):
        if MARK.encode() in text:
            tokenized.append(text)
        return tokenize(text, *args, **kwargs)

    monkeypatch.setitem(vars(smol), "tokenize", counted)  # an instance attribute, removed after the test
    return tokenized


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("route", ROUTES)
def test_a_chat_is_rendered_and_tokenized_once(client, prompts, route, stream):
    response = client.post(route, json=dict(ROUTES[route], stream=stream))
    assert response.status_code == 200, response.text
    assert len(prompts) == 1, f"{route}: the prompt was rendered and tokenized {len(prompts)} times"


def test_the_answer_is_the_models_chat_answer_whole_and_streamed(client, smol):
    """What admission learned is what generation runs: the text, finish and usage of
    create_chat_completion's own answer, whole and as a stream's deltas."""
    own = smol.create_chat_completion(MESSAGES, repeat_penalty=1.0, **GREEDY)
    whole = client.post("/v1/chat/completions", json=ROUTES["/v1/chat/completions"]).json()
    assert whole["choices"][0]["message"] == own["choices"][0]["message"]
    assert whole["choices"][0]["finish_reason"] == own["choices"][0]["finish_reason"]
    assert whole["usage"]["prompt_tokens"] == own["usage"]["prompt_tokens"]
    body = dict(ROUTES["/v1/chat/completions"], stream=True, stream_options={"include_usage": True})
    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        events = [line[len("data: "):] for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == own["choices"][0]["message"]["content"]
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == own["choices"][0]["finish_reason"]
    assert chunks[-1]["usage"]["prompt_tokens"] == own["usage"]["prompt_tokens"]


def test_a_legacy_function_call_keeps_llama_cpps_call_shape(client):
    """A ``function_call`` naming one of ``functions``: llama_cpp's handler answers it as a call
    (its own shape), which the server leaves to it."""
    function = {"name": "say", "parameters": {"type": "object", "properties": {"word": {"type": "string"}},
                                              "required": ["word"]}}
    body = {"messages": MESSAGES, "functions": [function], "function_call": {"name": "say"}, **GREEDY}
    choice = client.post("/v1/chat/completions", json=body).json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["function_call"]["name"] == "say"


def test_the_answers_logprobs_are_the_models_chat_logprobs(client, smol):
    """Logprobs through the rendered-once path: create_chat_completion's own, token by token,
    their bytes included (plookup.Llama adds them to a chat's logprobs; so does this path)."""
    asked = {"logprobs": True, "top_logprobs": 2}
    own = smol.create_chat_completion(MESSAGES, repeat_penalty=1.0, **asked, **GREEDY)
    whole = client.post("/v1/chat/completions", json=dict(ROUTES["/v1/chat/completions"], **asked)).json()
    assert whole["choices"][0]["logprobs"] == own["choices"][0]["logprobs"]
    assert len(whole["choices"][0]["logprobs"]["content"]) == own["usage"]["completion_tokens"]
