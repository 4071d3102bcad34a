"""The cross-request memory by scope (plookup.index.scopes): a request drafts from the earlier
requests of its own API key and cache_salt only, never from another tenant's (a latency that told
a client what another sent); without keys or salts, one shared memory as before. In process, on
SmolLM2 with a memory drafter."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

import plookup
from plookup.app.serve.app import create_app
from plookup.draft.drafters import make_drafter
from plookup.draft.policy import CPU_COST_CURVE
from plookup.index.memory import GlobalMemory

from conftest import LLAMA_KWARGS
from test_server_requests import ESSAY


@pytest.fixture
def remembering(model_path):
    return plookup.Llama(model_path["smollm2"], cost_curve=CPU_COST_CURVE,
                         drafter=make_drafter("suffix", 16, GlobalMemory(1 << 16)), **LLAMA_KWARGS)


def from_memory(client, **extra) -> int:
    answer = client.post("/v1/completions", json={**ESSAY, **extra}).json()
    return answer["usage"]["speculative"]["accepted_from_memory"]


def test_a_salt_drafts_only_from_its_own_requests(remembering):
    with TestClient(create_app(remembering, "smol")) as client:
        assert from_memory(client, cache_salt="alice") == 0
        assert from_memory(client, cache_salt="bob") == 0  # alice's answer is not bob's to draft from
        assert from_memory(client) == 0  # ... nor the unsalted requests'
        assert from_memory(client, cache_salt="alice") >= 24  # her own earlier answer, drafted
        assert from_memory(client) >= 24  # the shared memory: the unsalted request before


def test_control_without_scopes_every_request_drafts_from_every_other(remembering):
    with TestClient(create_app(remembering, "smol")) as client:
        assert from_memory(client) == 0
        assert from_memory(client) >= 24
