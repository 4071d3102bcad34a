"""The API key guard alone (no model): only the exact key, as a bearer token, passes; a mutation
audit found that accepting the key followed by anything went unnoticed by the server tests."""

from __future__ import annotations

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from plookup.app.serve.guards import RequireKey

KEY = "s3cret-key"


@pytest.fixture(scope="module")
def client():
    app = FastAPI()

    @app.get("/v1/models")
    def models():
        return {"ok": True}

    @app.get("/health")
    def health():
        return {"status": "ok"}

    app.add_middleware(RequireKey, key=KEY)
    with TestClient(app) as client:
        yield client


@pytest.mark.parametrize("header", [
    None, "", "Bearer", "Bearer ", f"Bearer {KEY}x", f"Bearer {KEY[:-1]}", f"Bearer x{KEY}", f"Basic {KEY}",
    f"Bearer {KEY.upper()}", KEY, f"Bearer{KEY}", f"Bearer {KEY} {KEY}",
])
def test_anything_but_the_key_as_a_bearer_token_is_401(client, header):
    headers = {} if header is None else {"Authorization": header}
    response = client.get("/v1/models", headers=headers)
    assert response.status_code == 401 and response.headers["www-authenticate"] == "Bearer"
    assert response.json()["error"]["code"] == "invalid_api_key"


@pytest.mark.parametrize("header", [f"Bearer {KEY}", f"bearer {KEY}", f"Bearer {KEY} "])
def test_the_key_passes(client, header):
    assert client.get("/v1/models", headers={"Authorization": header}).json() == {"ok": True}


def test_health_needs_no_key(client):
    assert client.get("/health").json() == {"status": "ok"}


@pytest.mark.parametrize("value, status", [(KEY, 200), (f" {KEY} ", 200), (f"{KEY}x", 401), ("", 401), (KEY.upper(), 401)])
def test_anthropics_x_api_key_header_is_a_key_too(client, value, status):
    """Claude Code sends its key as ``x-api-key`` (llama-server takes either header)."""
    assert client.get("/v1/models", headers={"x-api-key": value}).status_code == status


def test_a_wrong_bearer_token_is_not_saved_by_an_x_api_key(client):
    assert client.get("/v1/models", headers={"Authorization": "Bearer nope", "x-api-key": KEY}).status_code == 401
