"""`plookup serve` in a subprocess on 127.0.0.1, driven by the real `openai` client."""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request

import openai
import pytest

from conftest import STEPS_AFTER_HANG_UP, serving, steps_after_hang_up
from support.prompts import COUNT_PREDICTION, COUNT_PROMPT, COUNT_TEXT, FOX, FOX_PREDICTION, FOX_TEXT

MODEL = "smol"
GREEDY = dict(model=MODEL, temperature=0.0)


@pytest.fixture(scope="module")
def base_url():
    # Without the memory: these tests compare drafting with a prediction against drafting without
    # one, and the memory would draft every repeated request from its earlier answer.
    with serving(MODEL, "--no-memory") as (url, _):
        yield url


@pytest.fixture(scope="module")
def client(base_url):
    return openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0)


def count(client, **kwargs):
    return client.completions.create(prompt=COUNT_PROMPT, max_tokens=20, **GREEDY, **kwargs)


def post_raw(base_url: str, path: str, body: bytes) -> tuple[int, dict]:
    request = urllib.request.Request(f"{base_url}{path}", data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def metrics(base_url: str) -> dict[str, float]:
    """Every sample of /metrics, keyed by its name and labels."""
    with urllib.request.urlopen(f"{base_url}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


def test_models(client):
    assert [model.id for model in client.models.list()] == [MODEL]


def test_completion(client):
    result = count(client)
    assert result.choices[0].text == COUNT_TEXT
    assert result.choices[0].finish_reason == "length"
    assert result.usage.completion_tokens == 20
    spec = result.usage.model_dump()["speculative"]
    assert spec["generated"] == 20 and spec["accepted"] <= spec["drafted"]


def test_chat(client):
    result = client.chat.completions.create(messages=FOX, max_tokens=40, **GREEDY)
    assert result.choices[0].message.content == FOX_TEXT
    assert result.choices[0].finish_reason == "stop"


def test_streaming_equals_non_streaming(client):
    chunks = list(count(client, stream=True))
    assert "".join(chunk.choices[0].text for chunk in chunks) == COUNT_TEXT
    chat = client.chat.completions.create(messages=FOX, max_tokens=40, stream=True, **GREEDY)
    assert "".join(chunk.choices[0].delta.content or "" for chunk in chat) == FOX_TEXT


def test_completion_with_prediction(client):
    plain = count(client)
    predicted = count(client, extra_body={"prediction": COUNT_PREDICTION})
    assert predicted.choices[0].text == plain.choices[0].text == COUNT_TEXT
    details = predicted.usage.completion_tokens_details
    assert (details.accepted_prediction_tokens, details.rejected_prediction_tokens) == (20, 23)
    with_prediction, without = (r.usage.model_dump()["speculative"] for r in (predicted, plain))
    assert with_prediction["accepted"] > without["accepted"]
    assert with_prediction["forward_passes"] < without["forward_passes"]


def test_chat_with_prediction(client):
    result = client.chat.completions.create(messages=FOX, max_tokens=40, prediction=FOX_PREDICTION, **GREEDY)
    assert result.choices[0].message.content == FOX_TEXT
    details = result.usage.completion_tokens_details
    assert (details.accepted_prediction_tokens, details.rejected_prediction_tokens) == (9, 1)


def test_metrics_count_what_usage_reports(base_url, client):
    before = metrics(base_url)
    result = count(client, extra_body={"prediction": COUNT_PREDICTION})
    after = metrics(base_url)
    spec = result.usage.model_dump()["speculative"]
    delta = {key: after[key] - before.get(key, 0) for key in after}
    assert delta['plookup_requests_total{path="/v1/completions",status="200"}'] == 1
    assert delta["plookup_generated_tokens_total"] == spec["generated"]
    assert delta["plookup_forward_passes_total"] == spec["forward_passes"]
    assert delta["plookup_spec_decode_num_draft_tokens_total"] == spec["drafted"]
    assert delta["plookup_spec_decode_num_accepted_tokens_total"] == spec["accepted"]
    assert delta["plookup_prediction_accepted_tokens_total"] == 20
    for k, n in enumerate(spec["accepted_per_position"]):
        assert delta[f'plookup_spec_decode_num_accepted_tokens_per_pos_total{{position="{k}"}}'] == n


def test_malformed_json_is_400(base_url, client):
    status, body = post_raw(base_url, "/v1/completions", b'{"prompt": "1, 2,", "max_tokens": ')
    assert status == 400 and body["error"]["type"] == "invalid_request_error"
    status, body = post_raw(base_url, "/v1/chat/completions", json.dumps({"messages": "hi"}).encode())
    assert status == 400 and body["error"]["param"].startswith("messages")
    assert count(client).choices[0].text == COUNT_TEXT


@pytest.mark.parametrize("route", ["/v1/completions", "/v1/chat/completions"])
def test_a_grammar_that_does_not_parse_is_400_and_the_server_lives(base_url, client, route):
    """llama-cpp-python hands llama.cpp's NULL for such a grammar to the sampler chain: the first
    sample segfaulted the server. The check answers 400 with llama.cpp's reason, before the queue."""
    body = {"model": MODEL, "max_tokens": 4, "grammar": "root ::= undefined-rule"}
    body.update({"prompt": "hi"} if route == "/v1/completions" else {"messages": [{"role": "user", "content": "hi"}]})
    status, answer = post_raw(base_url, route, json.dumps(body).encode())
    assert status == 400, answer
    assert answer["error"]["param"] == "grammar" and answer["error"]["code"] == "invalid_grammar"
    assert "Undefined rule identifier 'undefined-rule'" in answer["error"]["message"]
    status, answer = post_raw(base_url, route, json.dumps(dict(body, grammar='root ::= "1"')).encode())
    assert status == 200
    assert count(client).choices[0].text == COUNT_TEXT


@pytest.mark.parametrize("name", ["", "gpt-4o-mini", "qwen2.5-coder:1.5b"])
def test_any_model_name_is_the_served_model(client, name):
    """llama-server serves its one model whatever a body names (llama.vim always sends ""): the
    same text, answered with the served id."""
    result = client.completions.create(prompt=COUNT_PROMPT, max_tokens=20, model=name, temperature=0.0)
    assert result.choices[0].text == COUNT_TEXT
    assert result.model == MODEL
    chat = client.chat.completions.create(messages=FOX, max_tokens=40, model=name, temperature=0.0)
    assert chat.choices[0].message.content == FOX_TEXT and chat.model == MODEL


def test_prompt_too_long_is_400(client):
    with pytest.raises(openai.BadRequestError) as error:
        client.completions.create(prompt="word " * 3000, max_tokens=4, **GREEDY)
    assert error.value.code == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(messages=[{"role": "user", "content": "word " * 3000}], max_tokens=4, **GREEDY)
    assert count(client).choices[0].text == COUNT_TEXT


def test_client_disconnecting_mid_stream_does_not_wedge_the_server(base_url, client):
    read = lambda name: metrics(base_url)[name]  # noqa: E731
    before_tokens, before_steps = read("plookup_generated_tokens_total"), read("plookup_steps_total")
    connection = http.client.HTTPConnection("127.0.0.1", int(base_url.rsplit(":", 1)[1]), timeout=60)
    body = {"prompt": COUNT_PROMPT, "max_tokens": 1500, "stream": True, **GREEDY}  # counts on and on
    connection.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    response = connection.getresponse()
    assert response.status == 200
    assert response.readline().startswith(b"data: {")  # generation is under way
    # The server streams on (the chunks wait in the socket) for 10 steps; its client leaves, and the
    # stream ends within a step or two of that.
    assert steps_after_hang_up(read, connection.close, before_steps) <= STEPS_AFTER_HANG_UP
    assert count(client).choices[0].text == COUNT_TEXT  # not wedged
    # Its stats are counted (before the model is let go): a token a step at least, the prefill's aside.
    assert read("plookup_generated_tokens_total") - before_tokens - 20 >= 9
