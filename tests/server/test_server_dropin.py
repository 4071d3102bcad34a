"""`plookup serve` where llama-server was: what its clients read of /v1/models and /props, OpenAI's
`n`, chat logprobs' bytes, and the server's -n (in process, on SmolLM2, with Starlette's TestClient)."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from plookup.app.serve.app import create_app
from plookup.app.serve.limits import Limits

from support.prompts import COUNT_PROMPT

MODEL = "smol"


@pytest.fixture(scope="module")
def client(smol):
    with TestClient(create_app(smol, MODEL)) as client:
        yield client


def test_models_and_props_carry_llama_servers_fields(client, smol):
    listing = client.get("/v1/models").json()
    (model,) = listing["data"]
    assert model["id"] == MODEL and model["object"] == "model" and model["owned_by"] == "llamacpp"
    meta = model["meta"]
    assert meta["n_vocab"] == smol.n_vocab() == 49152 and meta["n_ctx"] == smol.n_ctx()
    assert meta["n_ctx_train"] == 8192 and meta["n_embd"] == 576
    assert 134_000_000 < meta["n_params"] < 136_000_000 and 50_000_000 < meta["size"] < 100_000_000
    assert listing["models"][0]["name"] == MODEL  # Ollama's listing, which llama-server adds
    assert client.get("/models").json() == listing
    props = client.get("/props").json()
    assert props["total_slots"] == 1 and props["model_alias"] == MODEL and props["model_path"] == smol.model_path
    assert props["default_generation_settings"]["n_ctx"] == smol.n_ctx()
    assert props["default_generation_settings"]["params"]["temperature"] == 0.8
    assert props["chat_template"].startswith("{%") and props["build_info"].startswith("plookup")
    assert props["bos_token"] == "<|im_start|>" and props["eos_token"] == "<|im_end|>"


def test_n_gives_n_choices_or_a_400_naming_it(client):
    body = {"prompt": COUNT_PROMPT, "max_tokens": 6, "temperature": 0}
    answer = client.post("/v1/completions", json=dict(body, n=3)).json()
    assert [c["index"] for c in answer["choices"]] == [0, 1, 2]
    assert len({c["text"] for c in answer["choices"]}) == 1  # greedy: three times the same text
    assert answer["usage"]["completion_tokens"] == 18
    chat = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}],
                                                     "max_tokens": 4, "n": 2}).json()
    assert len(chat["choices"]) == 2 and all(c["message"]["role"] == "assistant" for c in chat["choices"])
    for bad in (dict(n=2, stream=True), dict(n=99), dict(n=2, n_cmpl=3)):
        refused = client.post("/v1/completions", json=dict(body, **bad))
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "n", bad


def test_chat_logprobs_carry_each_tokens_bytes(client):
    body = {"messages": [{"role": "user", "content": "Say: café ☕"}], "max_tokens": 12, "temperature": 0,
            "logprobs": True, "top_logprobs": 2}
    entries = client.post("/v1/chat/completions", json=body).json()["choices"][0]["logprobs"]["content"]
    assert len(entries) == 12
    for entry in entries:
        assert entry["bytes"] == list(entry["token"].encode("utf-8"))
        assert all(top["bytes"] == list(top["token"].encode("utf-8")) for top in entry["top_logprobs"])
    with client.stream("POST", "/v1/chat/completions", json=dict(body, stream=True)) as response:
        chunks = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")]
    streamed = [e for c in chunks for e in ((c["choices"][0].get("logprobs") or {}).get("content") or [])]
    assert [e["token"] for e in streamed] == [e["token"] for e in entries]
    assert all(e["bytes"] == list(e["token"].encode("utf-8")) for e in streamed)


def test_the_servers_n_predict_is_a_requests_default_and_bound(smol):
    """llama-server's -n: a request that names no number gets it, one that names more is cut to it."""
    with TestClient(create_app(smol, MODEL, Limits(n_predict=5))) as client:
        body = {"prompt": COUNT_PROMPT, "temperature": 0}
        assert client.post("/v1/completions", json=dict(body, max_tokens=20)).json()["usage"]["completion_tokens"] == 5
        assert client.post("/v1/completions", json=dict(body, max_tokens=3)).json()["usage"]["completion_tokens"] == 3
        answer = client.post("/completion", json={"prompt": COUNT_PROMPT, "temperature": 0}).json()
        assert answer["tokens_predicted"] == 5
        assert client.post("/completion", json={"prompt": COUNT_PROMPT, "n_predict": 0}).status_code == 200  # a warm-up
