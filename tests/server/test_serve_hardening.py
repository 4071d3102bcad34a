"""`plookup serve` under a careless or hostile client: limits with OpenAI-style statuses, an API key,
cancelled work, honest errors and bounded metrics. Each test fails without the guard it names.

In-process tests drive the app with Starlette's TestClient (and can look inside the model); the
rest run `plookup serve` in a subprocess on 127.0.0.1 and talk HTTP to it.
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.error
import urllib.request

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from plookup.app.serve.app import create_app
from plookup.app.serve.limits import Limits

from conftest import STEPS_AFTER_HANG_UP, serving, steps_after_hang_up
from support.prompts import COUNT_PROMPT, COUNT_TEXT

MODEL = "smol"
LIMITS = Limits(max_body_bytes=16_384, max_prediction_tokens=64, max_queue=1)
KEY = "s3cret-key"


@pytest.fixture(scope="module")
def client(smol):
    with TestClient(create_app(smol, MODEL, LIMITS)) as client:
        yield client


def count(client, **extra):
    return client.post("/v1/completions", json={"prompt": COUNT_PROMPT, "max_tokens": 20, "temperature": 0, **extra})


def samples(client) -> dict[str, float]:
    """Every sample of /metrics by name and labels, read with prometheus_client's own parser."""
    families = text_string_to_metric_families(client.get("/metrics").text)
    return {
        s.name + json.dumps(s.labels, sort_keys=True): s.value for family in families for s in family.samples
    }


def generation_counters(metrics: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in metrics.items() if "tokens" in k or "forward_passes" in k or "num_drafts" in k}


# -- limits


def test_oversize_body_is_413_by_length_and_while_reading(client):
    big = json.dumps({"prompt": "x" * LIMITS.max_body_bytes, "max_tokens": 1}).encode()
    response = client.post("/v1/completions", content=big, headers={"Content-Type": "application/json"})
    assert response.status_code == 413 and response.json()["error"]["code"] == "request_too_large"

    def chunks():  # no Content-Length: the limit is counted as the body arrives
        for i in range(0, len(big), 4096):
            yield big[i : i + 4096]

    response = client.post("/v1/completions", content=chunks(), headers={"Content-Type": "application/json"})
    assert response.status_code == 413
    assert count(client).json()["choices"][0]["text"] == COUNT_TEXT


def test_oversize_prediction_is_400_before_it_is_indexed(client, smol, monkeypatch):
    started = []
    monkeypatch.setattr(smol.drafter, "start", lambda tokens: started.append(len(tokens)))
    before = generation_counters(samples(client))
    response = count(client, prediction={"type": "content", "content": " 13," * 200})
    assert response.status_code == 400 and response.json()["error"]["code"] == "prediction_too_long"
    assert started == [] and generation_counters(samples(client)) == before
    monkeypatch.undo()
    assert count(client, prediction={"type": "content", "content": " 13, 14,"}).status_code == 200


def test_prompt_over_the_context_is_400_before_any_work_streamed_or_not(client, smol, monkeypatch):
    decodes = []
    monkeypatch.setattr(smol, "eval", lambda tokens: decodes.append(len(tokens)))
    waited = samples(client)["plookup_queue_wait_seconds_count{}"]  # requests let through to the model
    for stream in (False, True):
        response = client.post("/v1/completions", json={"prompt": "word " * 3000, "max_tokens": 4, "stream": stream})
        assert response.status_code == 400 and response.json()["error"]["code"] == "context_length_exceeded"
        chat = {"messages": [{"role": "user", "content": "word " * 3000}], "max_tokens": 4, "stream": stream}
        response = client.post("/v1/chat/completions", json=chat)
        assert response.status_code == 400 and response.json()["error"]["code"] == "context_length_exceeded"
    assert decodes == [] and samples(client)["plookup_queue_wait_seconds_count{}"] == waited


def test_a_failure_inside_is_a_500_without_its_text(smol, monkeypatch):
    with TestClient(create_app(smol, MODEL, LIMITS), raise_server_exceptions=False) as client:
        monkeypatch.setattr(smol, "create_completion", lambda **kwargs: 1 / 0)
        response = count(client)
        assert response.status_code == 500
        assert response.json() == {"error": {"message": "internal error", "type": "internal_server_error",
                                              "param": None, "code": None}}
        assert "ZeroDivision" not in response.text and "Traceback" not in response.text
        assert samples(client)['plookup_requests_total{"path": "/v1/completions", "status": "500"}'] == 1


# -- metrics


def test_a_failed_request_counts_as_a_request_and_adds_no_generation(client):
    before = samples(client)
    assert count(client, grammar="root ::= undefined-rule").status_code == 400
    assert client.post("/v1/completions", content=b"{", headers={"Content-Type": "application/json"}).status_code == 400
    after = samples(client)
    assert generation_counters(after) == generation_counters(before)
    key = 'plookup_requests_total{"path": "/v1/completions", "status": "%d"}'
    assert after[key % 400] - before.get(key % 400, 0) == 2


def test_streamed_requests_count_like_others_predictions_included(client):
    before = samples(client)
    body = {"prompt": COUNT_PROMPT, "max_tokens": 20, "temperature": 0, "stream": True,
            "prediction": {"type": "content", "content": " 13, 14, 15, 16, 17, 18, 19, 20"}}
    with client.stream("POST", "/v1/completions", json=body) as response:
        events = [line for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]"
    text = "".join(json.loads(e[6:])["choices"][0]["text"] for e in events[:-1])
    assert text == COUNT_TEXT
    after = samples(client)
    assert after["plookup_generated_tokens_total{}"] - before["plookup_generated_tokens_total{}"] == 20
    assert after["plookup_prediction_accepted_tokens_total{}"] > before["plookup_prediction_accepted_tokens_total{}"]


def test_unknown_paths_share_one_label_and_labels_parse(client):
    for i in range(1000):
        assert client.get(f"/nope/{i}").status_code == 404
    client.get("/v1/%22quoted%22%5Cback%0Aslash")  # decoded: a quote, a backslash, a newline
    paths = {json.loads(k[len("plookup_requests_total"):])["path"] for k in samples(client)
             if k.startswith("plookup_requests_total")}
    assert paths <= {"/v1/completions", "/v1/chat/completions", "/v1/models", "/metrics", "/health", "other"}
    assert "other" in paths


# -- the decoder stops a cancelled request within one step


def test_cancelled_generation_stops_within_one_step(smol):
    seen = []
    with smol.request(cancelled=lambda: len(seen) >= 5) as call:
        for token in smol.generate(smol.tokenize(COUNT_PROMPT.encode()), temp=0.0):
            seen.append(token)
            if len(seen) > 200:
                break
    # Once the predicate is true the step under way ends; one step emits at most max_draft + 1.
    assert 5 <= call.stats.generated <= 5 + smol.max_draft + 1 and len(seen) == call.stats.generated


# -- over HTTP: the key, the queue, and a client that hangs up


def call(url: str, path: str, body: dict | None = None, key: str | None = None):
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url + path, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, response.headers, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, e.headers, json.loads(e.read() or b"null")


def metric(url: str, name: str, key: str) -> float:
    request = urllib.request.Request(url + "/metrics", headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        for family in text_string_to_metric_families(response.read().decode()):
            for sample in family.samples:
                if sample.name == name:
                    return sample.value
    raise KeyError(name)


@pytest.fixture(scope="module")
def guarded():
    options = ("--api-key", KEY, "--max-queue", "1")
    with serving(MODEL, *options) as (url, _):
        yield url


def test_every_route_but_health_needs_the_key(guarded):
    body = {"prompt": COUNT_PROMPT, "max_tokens": 4}
    for key in (None, "wrong", KEY[:-1]):
        for path, payload in (("/v1/completions", body), ("/v1/models", None), ("/metrics", None)):
            status, headers, answer = call(guarded, path, payload, key)
            assert status == 401 and answer["error"]["code"] == "invalid_api_key", (path, key)
    assert call(guarded, "/health")[0] == 200
    assert call(guarded, "/v1/completions", body, KEY)[0] == 200


LONG = {"prompt": COUNT_PROMPT, "max_tokens": 1500, "temperature": 0}  # counts on and on
SHORT = {"prompt": COUNT_PROMPT, "max_tokens": 20, "temperature": 0}
# The same requests on llama-server's own route (its n_predict; its answer's text is "content").
LLAMA = {"prompt": COUNT_PROMPT, "temperature": 0}
ROUTES = {
    "/v1/completions": (LONG, SHORT, lambda answer: answer["choices"][0]["text"]),
    "/completion": (dict(LLAMA, n_predict=1500), dict(LLAMA, n_predict=20), lambda answer: answer["content"]),
}


def start(url: str, body: dict, path: str = "/v1/completions") -> http.client.HTTPConnection:
    connection = http.client.HTTPConnection("127.0.0.1", int(url.rsplit(":", 1)[1]), timeout=120)
    connection.request("POST", path, json.dumps(body),
                       {"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"})
    return connection


def wait_for_queue(url: str, depth: int) -> None:
    deadline = time.monotonic() + 60
    while metric(url, "plookup_queue_depth", KEY) != depth:
        assert time.monotonic() < deadline, f"queue depth never reached {depth}"
        time.sleep(0.05)


@pytest.mark.parametrize("path", ROUTES)
def test_full_queue_is_429_with_retry_after(guarded, path):
    long, short, _ = ROUTES[path]
    holder = start(guarded, {**long, "stream": True}, path)  # holds the model
    stream = holder.getresponse()
    assert stream.status == 200 and stream.readline().startswith(b"data: {")
    waiter = start(guarded, long, path)  # waits for it (--max-queue 1)
    wait_for_queue(guarded, 1)
    status, headers, answer = call(guarded, path, short, KEY)
    assert status == 429 and answer["error"]["code"] == "queue_full" and int(headers["Retry-After"]) >= 1
    holder.close()
    waiter.close()
    wait_for_queue(guarded, 0)  # the waiter got the model once the holder left
    assert call(guarded, path, short, KEY)[0] == 200


@pytest.mark.parametrize("path", ROUTES)
def test_a_non_streamed_request_whose_client_hangs_up_stops_generating(guarded, path):
    long, short, text = ROUTES[path]
    read = lambda name: metric(guarded, name, KEY)  # noqa: E731
    before_tokens, before_steps = read("plookup_generated_tokens_total"), read("plookup_steps_total")
    abandoned = start(guarded, long, path)
    # It generates for 10 steps, its client leaves, and it ends within a step or two of that.
    assert steps_after_hang_up(read, abandoned.close, before_steps) <= STEPS_AFTER_HANG_UP
    assert text(call(guarded, path, short, KEY)[2]) == COUNT_TEXT  # not wedged
    # Its stats are counted (before the model is let go): a token a step at least, the prefill's aside.
    assert read("plookup_generated_tokens_total") - before_tokens - 20 >= 9
