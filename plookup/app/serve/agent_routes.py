"""The coding agents' wires, as llama-server serves them: OpenAI's Responses API (``/v1/responses``,
Codex CLI's only wire) and Anthropic's Messages API (``/v1/messages``, Claude Code's).

Each request becomes one chat request (:class:`.requests.ChatCompletionRequest`) by its module's
``to_chat`` (:mod:`.responses_api`, :mod:`.messages_api`), and goes the one admission path every
chat goes (:meth:`.app.Service.respond`): the same checks, gate, tools, drafting and stats. Its
exchange turns OpenAI's chat answer, its calls already parsed (:mod:`.chat`), into the wire's own
answer or events.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from fastapi import FastAPI, Request
from pydantic import ValidationError

from . import messages_api, responses_api
from .controls import Exchange
from .errors import APIError, validation_message
from .requests import ChatCompletionRequest

AGENT_ROUTES = frozenset({"/v1/responses", "/responses", "/v1/messages", "/v1/messages/count_tokens"})


def chat_request(body: dict) -> ChatCompletionRequest:
    """The chat request a converted body makes (a 400 naming what is wrong in it)."""
    try:
        return ChatCompletionRequest.model_validate(body)
    except ValidationError as e:
        raise APIError(400, validation_message(e.errors())) from e


def converted(to_chat, request) -> ChatCompletionRequest:
    try:
        return chat_request(to_chat(request))
    except ValueError as e:
        raise APIError(400, str(e)) from e


class ConvertedExchange(Exchange):
    """A chat request's exchange, its OpenAI answer and events converted to another wire's.
    The stream's finish reason is kept from its last chunk, for the closing events."""

    def __init__(self, chat: ChatCompletionRequest, llm, model_name: str):
        super().__init__(chat, llm, model_name)
        self.finish_reason: Optional[str] = None

    def finished(self, chunks: list[dict]) -> list[dict]:
        for chunk in chunks:
            for choice in chunk.get("choices") or ():
                self.finish_reason = choice.get("finish_reason") or self.finish_reason
        return chunks

    def usage(self, call) -> dict:
        completion = 0 if self.warm_up else len(self.watch.completion_tokens())
        return {"prompt_tokens": len(self.prompt), "completion_tokens": completion,
                "total_tokens": len(self.prompt) + completion,
                "prompt_tokens_details": {"cached_tokens": self.timings(call)["cache_n"]}}


class MessagesExchange(ConvertedExchange):
    """Anthropic's Message, or its stream's events."""

    def __init__(self, chat: ChatCompletionRequest, llm, model_name: str, asked_model: str):
        super().__init__(chat, llm, model_name)
        self.asked_model = asked_model or model_name
        self.stream: Optional[messages_api.MessageStream] = None

    def whole(self, result: dict, call) -> Any:
        return messages_api.from_chat(super().whole(result, call), self.asked_model)

    def events_of(self) -> messages_api.MessageStream:
        """The stream's events, begun at its first chunk (or at its closing where it had none)."""
        if self.stream is None:
            self.stream = messages_api.MessageStream(self.asked_model, len(self.prompt))
        return self.stream

    def events(self, chunk: dict) -> list[dict]:
        stream = self.events_of()
        return [event for c in self.finished(self.chunks(chunk)) for event in stream.events(c)]

    def closing(self, call) -> list[dict]:
        self.watch.clock.stopped()
        return self.events_of().closing(self.finish_reason, self.usage(call)["completion_tokens"])

    def failed(self, error: APIError) -> list[dict]:
        return [{"event": "error", "data": json.dumps(messages_api.error_body(error.status, str(error)))}]

    def opening(self) -> list[dict]:
        return self.events_of().start()

    def waiting(self) -> list[dict]:
        return [messages_api.event("ping")]


class ResponsesExchange(ConvertedExchange):
    """OpenAI's Response, or its stream's events."""

    def __init__(self, chat: ChatCompletionRequest, llm, model_name: str, request: responses_api.ResponsesRequest):
        super().__init__(chat, llm, model_name)
        self.request = request
        self.stream: Optional[responses_api.ResponseStream] = None

    def whole(self, result: dict, call) -> Any:
        return responses_api.from_chat(super().whole(result, call), self.request)

    def opened(self) -> list[dict]:
        if self.stream is not None:
            return []
        self.stream = responses_api.ResponseStream(self.request)
        return self.stream.opening()

    def events(self, chunk: dict) -> list[dict]:
        opening = self.opened()
        return opening + [event for c in self.finished(self.chunks(chunk)) for event in self.stream.events(c)]

    def closing(self, call) -> list[dict]:
        self.watch.clock.stopped()
        opening = self.opened()
        return opening + self.stream.closing(self.finish_reason, self.usage(call))

    def failed(self, error: APIError) -> list[dict]:
        return self.opened() + self.stream.failing(str(error))

    def opening(self) -> list[dict]:
        return self.opened()

    def waiting(self) -> list[dict]:
        return self.stream.waiting()


def add_agent_routes(app: FastAPI, service) -> None:
    """Register the agents' routes on `app`, served by `service` (:class:`.app.Service`)."""

    async def responses(request: Request, body: responses_api.ResponsesRequest):
        chat = converted(responses_api.to_chat, body)
        return await service.respond(request, chat, "create_chat_completion",
                                     ResponsesExchange(chat, service.llm, service.model_name, body))

    for path in ("/v1/responses", "/responses"):
        app.post(path)(responses)

    @app.post("/v1/messages")
    async def messages(request: Request, body: messages_api.MessagesRequest):
        chat = converted(messages_api.to_chat, body)
        return await service.respond(request, chat, "create_chat_completion",
                                     MessagesExchange(chat, service.llm, service.model_name, body.model))

    @app.post("/v1/messages/count_tokens")
    async def count_tokens(body: messages_api.MessagesRequest):
        chat = converted(messages_api.to_chat, body)
        exchange = MessagesExchange(chat, service.llm, service.model_name, body.model)
        await service.check_request(chat, "create_chat_completion", exchange)
        return {"input_tokens": len(exchange.prompt)}
