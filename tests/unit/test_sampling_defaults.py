"""A request that names no sampling field is sampled as llama-server samples it, on every route:
llama_cpp.server's schemas, which plookup serve's OpenAI bodies extend, default repeat_penalty to
1.1, and a penalty changes greedy text (an agent's turn, a proofread paragraph) from llama-server's."""

from __future__ import annotations

import pytest
from llama_cpp.server.types import CreateChatCompletionRequest, CreateCompletionRequest

from plookup.app.serve.app import NOT_FORWARDED
from plookup.app.serve.controls import DEFAULTS
from plookup.app.serve.llama_routes import InfillBody, LlamaCompletionBody
from plookup.app.serve.messages_api import MessagesRequest
from plookup.app.serve.messages_api import to_chat as messages_to_chat
from plookup.app.serve.requests import ChatCompletionRequest, CompletionRequest
from plookup.app.serve.responses_api import ResponsesRequest
from plookup.app.serve.responses_api import to_chat as responses_to_chat

# llama-server's defaults (tools/server/README.md, "/completion"; `--repeat-penalty N (default: 1.0,
# 1.0 = disabled)`), written out here rather than read from plookup's own table
LLAMA_SERVER = dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.0,
                    presence_penalty=0.0, frequency_penalty=0.0)
USER = [{"role": "user", "content": "Fix the typos: teh cat"}]

BODIES = {
    "/v1/chat/completions": lambda: ChatCompletionRequest(messages=USER),
    "/v1/completions": lambda: CompletionRequest(prompt="teh cat"),
    "/completion": lambda: LlamaCompletionBody(prompt="teh cat"),
    "/infill": lambda: InfillBody(input_prefix="def f(", input_suffix=")"),
    "/v1/responses": lambda: ChatCompletionRequest(**responses_to_chat(ResponsesRequest(input="teh cat"))),
    "/v1/messages": lambda: ChatCompletionRequest(**messages_to_chat(
        MessagesRequest(model="any", max_tokens=64, messages=USER))),
}


@pytest.mark.parametrize("route", BODIES)
def test_unset_sampling_fields_are_llama_servers(route):
    kwargs = BODIES[route]().model_dump(exclude=NOT_FORWARDED)
    assert {name: kwargs[name] for name in LLAMA_SERVER} == LLAMA_SERVER, route


def test_the_table_is_llama_servers():
    shared = DEFAULTS.keys() & LLAMA_SERVER.keys()
    assert {k: DEFAULTS[k] for k in shared} == {k: LLAMA_SERVER[k] for k in shared}


def test_control_llama_cpp_servers_schemas_penalise():
    # what the bodies would send without their own default: the rule above can fail
    assert CreateChatCompletionRequest(messages=USER).repeat_penalty == 1.1
    assert CreateCompletionRequest(prompt="x").repeat_penalty == 1.1
