"""The OpenAI-compatible FastAPI app behind `plookup serve`, serving one :class:`plookup.Llama`.

Reused from llama_cpp.server: the request schemas (every sampling field it accepts, with its
defaults), ``prepare_request_resources`` (logit_bias, grammar, min_tokens) and its error wording.
Not reused: its settings and ``LlamaProxy`` (they construct ``llama_cpp.Llama``) and its routes,
which drop ``prediction``, answer invalid requests with 500, and leave an abandoned stream's
generator to the garbage collector.
"""

from __future__ import annotations

import json
import time
from typing import Callable, List, Literal, Optional, Union

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse
from llama_cpp.server.app import prepare_request_resources
from llama_cpp.server.types import CreateChatCompletionRequest, CreateCompletionRequest
from pydantic import BaseModel
from sse_starlette.sse import EventSourceResponse
from starlette.concurrency import iterate_in_threadpool, run_in_threadpool

from ..decoder import Llama
from . import metrics as prometheus
from .errors import APIError, error_event, install_error_handlers, model_error


class PredictionTextPart(BaseModel):
    type: Literal["text"]
    text: str


class Prediction(BaseModel):
    """OpenAI's Predicted Outputs: text much of the output is expected to repeat."""

    type: Literal["content"]
    content: Union[str, List[PredictionTextPart]]


class CompletionRequest(CreateCompletionRequest):
    prediction: Optional[Prediction] = None


class ChatCompletionRequest(CreateChatCompletionRequest):
    prediction: Optional[Prediction] = None


# Request fields the create_* methods do not take (llama_cpp.server drops the same ones).
NOT_FORWARDED = {"n", "best_of", "logit_bias_type", "user", "min_tokens", "prediction"}


def create_app(llm: Llama, model_name: str) -> FastAPI:
    """The app serving `llm` to requests whose ``model`` is `model_name` (or absent)."""
    lock = anyio.Lock()  # one generation at a time: the model has a single KV cache
    metrics = prometheus.Metrics()
    created = int(time.time())
    app = FastAPI(title="plookup")
    install_error_handlers(app, lambda request, status: metrics.count_request(request.url.path, status))

    def call_arguments(body: CompletionRequest | ChatCompletionRequest) -> dict:
        if body.model not in (None, model_name):
            raise APIError(404, f"The model `{body.model}` does not exist", param="model", code="model_not_found")
        kwargs = body.model_dump(exclude=NOT_FORWARDED)
        if body.prediction is not None:
            kwargs["prediction"] = body.prediction.model_dump()
        prepare_request_resources(body, lambda _model: llm, body.model, kwargs)
        return kwargs

    def record(usage: dict) -> None:
        metrics.record_generation(usage["speculative"])
        if "completion_tokens_details" in usage:
            metrics.record_prediction(usage["completion_tokens_details"])

    async def respond(request: Request, body, create: Callable):
        kwargs = call_arguments(body)
        if body.stream:
            metrics.count_request(request.url.path, 200)
            return EventSourceResponse(stream(body, create, kwargs), sep="\n")
        async with lock:
            try:
                result = await run_in_threadpool(create, **kwargs)
            except ValueError as e:
                raise model_error(e, body) from e
            record(result["usage"])
        metrics.count_request(request.url.path, 200)
        return result

    async def stream(body, create: Callable, kwargs: dict):
        async with lock:
            chunks = None
            try:
                chunks = await run_in_threadpool(create, **kwargs)
                async for chunk in iterate_in_threadpool(chunks):
                    yield {"data": json.dumps(chunk)}
                yield {"data": "[DONE]"}
            except ValueError as e:
                yield error_event(model_error(e, body))
            finally:
                # Close the generator now, under the lock: left to the garbage collector (as when
                # the client disconnects), its cleanup would cut the KV cache of a later request.
                with anyio.CancelScope(shield=True):
                    if chunks is not None:
                        await run_in_threadpool(chunks.close)
                        metrics.record_generation(chunks.stats.as_dict())

    @app.post("/v1/completions")
    async def completions(request: Request, body: CompletionRequest):
        if isinstance(body.prompt, list):
            if len(body.prompt) != 1:
                raise APIError(400, "plookup serves one prompt per request", param="prompt")
            body.prompt = body.prompt[0]
        return await respond(request, body, llm.create_completion)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request, body: ChatCompletionRequest):
        return await respond(request, body, llm.create_chat_completion)

    @app.get("/v1/models")
    async def models(request: Request):
        metrics.count_request(request.url.path, 200)
        model = {"id": model_name, "object": "model", "created": created, "owned_by": "plookup"}
        return {"object": "list", "data": [model]}

    @app.get("/metrics")
    async def metrics_text(request: Request):
        metrics.count_request(request.url.path, 200)
        return PlainTextResponse(metrics.render(), media_type=prometheus.CONTENT_TYPE)

    return app
