"""The OpenAI-compatible FastAPI app behind `plookup serve`, serving one :class:`plookup.Llama`.

A completion request passes, in order: the guards (API key, body size; :mod:`.guards`); the
checks that need no model time (model name, prediction size, and the prompt's length, measured by
llama_cpp's own request preparation) so that every refusal is a real 4xx, a streamed request's
included; the gate (as many generations at a time as the model has slots, ``--parallel``; a
bounded queue beyond them); the generation, in a worker thread, as one
:meth:`plookup.Llama.request` that ends at the next step once the client hangs up (the model's
engine decodes every running generation in the same steps);
and, after the gate, prediction accounting and metrics from that request's own stats.

Reused from llama_cpp.server: the request schemas (every sampling field it accepts, with its
defaults), ``prepare_request_resources`` (logit_bias, grammar, min_tokens) and its error wording.
Not reused: its settings and ``LlamaProxy`` (they construct ``llama_cpp.Llama``) and its routes,
which drop ``prediction``, answer invalid requests with 500, and leave an abandoned stream's
generator to the garbage collector.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import Callable, Iterator, Optional, Sequence

import anyio
import llama_cpp
from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import Response
from llama_cpp.llama_chat_format import (
    _convert_completion_to_chat,
    chat_formatter_to_chat_completion_handler,
    get_chat_completion_handler,
)
from llama_cpp.server.app import prepare_request_resources
from sse_starlette.sse import EventSourceResponse
from starlette.concurrency import run_in_threadpool

from ...api.llama import Llama
from ...api.logprobs import check_logprobs, with_chat_bytes
from ...api.prediction import chunk_text, completion_text, prediction_text
from ...index.scopes import MemoryScopes, scope_of
from ...verify.grammar import check_grammar
from .agent_routes import AGENT_ROUTES, add_agent_routes
from .chat import template_of, tool_plan
from .controls import Exchange, LlamaOptions, merge_completions
from .errors import PROMPT_OVER_CONTEXT, APIError, install_error_handlers, model_error
from .guards import CountRequests, LimitBody, ModelGate, RequireKey, request_key
from .limits import ANY_ORIGIN, Limits
from .lost import RpcWatch
from .llama_routes import LLAMA_ROUTES, add_llama_routes
from .metrics import CONTENT_TYPE, Metrics
from .requests import (
    ChatCompletionRequest,
    CompletionRequest,
    check_text_only,
    completion_prompts,
    folded_system,
    function_tools,
    response_format_grammar,
    template_messages,
)

ROUTES = frozenset({"/v1/completions", "/v1/chat/completions", "/v1/models", "/metrics", "/health"})


# Seconds between the events a stream that opened at once sends while its prompt is evaluated
# (Codex CLI gives up on a stream idle for 300 s; its first prompt alone is 6,000 tokens).
WAITING_EVERY = 5.0

# The prompt's last tokens, read for a reasoning block the chat template opened (``<think>\n``).
PROMPT_END = 8

# Request fields the create_* methods do not take (llama_cpp.server drops the same ones).
NOT_FORWARDED = {"n", "best_of", "logit_bias_type", "user", "min_tokens", "prediction", "stream", "parallel_tool_calls"}


class PromptTokens(Exception):
    """Raised by :class:`PromptProbe` where generation would start, carrying the prompt and, for a
    chat, the arguments its chat handler gave create_completion (None: no handler made them)."""

    def __init__(self, tokens):
        super().__init__()
        self.tokens = list(tokens)
        self.completion: Optional[dict] = None


class PromptProbe:
    """Stands in for the model in llama_cpp's own request preparation (chat template, infill
    tokens, length check) and stops where generation would start: the prompt is known, and a
    prompt over the context window has raised llama_cpp's ValueError, before any model time.
    Reads the model's tokenizer and settings only; touches neither its context nor its seed."""

    cache = None

    def __init__(self, llm: Llama):
        self._llm = llm

    def __getattr__(self, name):
        return getattr(self._llm, name)

    def set_seed(self, seed) -> None:
        pass

    def generate(self, tokens, *args, **kwargs):
        raise PromptTokens(tokens)

    def _create_completion(self, *args, logprobs=None, **kwargs):
        # Both routes' logprobs arrive here (a chat handler's as its top_logprobs): refused now
        # if plookup.Llama would refuse them, and kept from llama_cpp, which gives them only with
        # logits_all (the prompt does not depend on them).
        check_logprobs(logprobs, kwargs.get("echo", False))
        return llama_cpp.Llama._create_completion(self, *args, **kwargs)

    def create_completion(self, *args, **kwargs):
        # A chat handler's completion: its arguments hold the prompt as tokens (rendered and
        # tokenized here, once) for the generation to run as they are (:func:`chat_from_completion`).
        try:
            return llama_cpp.Llama.create_completion(self, *args, **kwargs)
        except PromptTokens as found:
            found.completion = {k: v for k, v in kwargs.items() if k != "stream"}  # (Exchange.run passes it)
            raise

    def prompt(self, create_name: str, kwargs: dict) -> PromptTokens:
        try:
            getattr(llama_cpp.Llama, create_name)(self, **dict(kwargs, stream=False))
        except PromptTokens as found:
            return found
        raise RuntimeError("llama_cpp's request preparation ended without generating")


# The code of llama_cpp's chat handler for a chat template (a GGUF's Jinja, --chat-template, a
# named format): it renders and tokenizes the prompt, hands it to create_completion, and reshapes
# the completion as a chat, which :func:`chat_from_completion` does the same way (its source, as
# read, is pinned by tests/unit/test_llama_cpp_chat_handler.py).
TEMPLATE_HANDLER = chat_formatter_to_chat_completion_handler(None).__code__


def completes_as_template_handler(llm: Llama, kwargs: dict) -> bool:
    """Whether `llm` answers this chat with llama_cpp's template handler, reshaped as a text answer:
    not where another handler renders it (function calling formats may generate more than once)
    or a named function is chosen, by a legacy ``function_call`` or a ``tool_choice`` (the
    handler's answer is then a call in llama_cpp's own shape; the tool plan sets tool_choice
    to None for the calls it parses itself)."""
    handler = llm.chat_handler or llm._chat_handlers.get(llm.chat_format) or get_chat_completion_handler(llm.chat_format)
    named = isinstance(kwargs.get("function_call"), dict) or isinstance(kwargs.get("tool_choice"), dict)
    return getattr(handler, "__code__", None) is TEMPLATE_HANDLER and not named


def chat_from_completion(llm: Llama) -> Callable:
    """``create(**completion, stream=...)``: the chat the template handler's `completion`
    arguments answer, as create_chat_completion would give it (the chat's shape from
    llama_cpp's own conversion, its logprobs' bytes as plookup.Llama adds them) without
    rendering the template again."""

    def create(stream: bool = False, **completion):
        result = llm.create_completion(**completion, stream=stream)
        chat = with_chat_bytes(_convert_completion_to_chat(result, stream=stream))  # (without logprobs: unchanged)
        return closing_too(chat, result) if stream else chat

    return create


def closing_too(chunks: Iterator[dict], source) -> Iterator[dict]:
    """`chunks`, converted from `source`'s: closing them closes `source` now, not when collected."""
    try:
        yield from chunks
    finally:
        source.close()


class ClosingEventSource(EventSourceResponse):
    """An event stream that runs `on_close` however its response ends: sent, failed, or cut off
    by the client (the gate and the model's stream must never wait for the garbage collector)."""

    def __init__(self, content, on_close: Callable, **kwargs):
        super().__init__(content, **kwargs)
        self._on_close = on_close

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                await self._on_close()


async def watch_disconnect(request: Request, gone: threading.Event) -> None:
    """Set `gone` when the client hangs up (the body is read: receive waits for the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
    gone.set()


class Service:
    """What the routes do with one model: check a request (the checks that need no model time),
    run it through the gate, and account for it from its own stats."""

    def __init__(self, llm: Llama, model_name: str, limits: Limits, metrics: Metrics, keyed: bool = False,
                 chat_template: Optional[str] = None):
        """`keyed`: the server asks for API keys, and each key drafts from a memory of its own;
        `chat_template`: the Jinja text chats are rendered with, where not the GGUF's."""
        self.llm, self.model_name, self.limits, self.metrics = llm, model_name, limits, metrics
        self.chat_template = template_of(llm, chat_template)
        shared = getattr(llm.drafter, "own_memory", None)
        self.memories = MemoryScopes(shared) if shared is not None else None
        self.keyed = keyed
        rpc = getattr(llm, "rpc_devices", None)
        self.rpc_watch = RpcWatch(rpc.endpoints if rpc is not None else ())
        self.gate = ModelGate(limits.max_queue, on_depth=metrics.queue_depth.set, slots=llm.parallel)
        self.probe = PromptProbe(llm)

    def arguments(self, body, exchange: Exchange) -> tuple[dict, Optional[dict]]:
        """(create_* keyword arguments, prediction): refused with 404 or 400 before any work. A
        chat's tools are decided here once (:func:`.chat.tool_plan`), for the prompt, the
        sampler and the answer's shape."""
        # One model is served, whatever name a body gives it (llama.vim sends "", other editors the
        # name in their settings), as llama-server serves it: answers carry the served id.
        prediction = body.prediction.model_dump() if body.prediction is not None else None
        if prediction is not None:
            self.check_prediction_size(prediction_text(prediction))
        kwargs = body.model_dump(exclude=NOT_FORWARDED)
        kwargs["model"] = self.model_name
        prepare_request_resources(body, lambda _model: self.llm, self.model_name, kwargs)
        param = "grammar"
        if isinstance(body, ChatCompletionRequest):
            kwargs["messages"] = template_messages(body.messages)
            check_text_only(kwargs["messages"])
            plan = tool_plan(self.chat_template, function_tools(body.tools), body.tool_choice, body.parallel_tool_calls)
            kwargs["messages"] = plan.messages(kwargs["messages"])
            # The template is handed the tools; the choice is the plan's (llama_cpp's handler
            # would constrain a named function's arguments alone, outside the family's format).
            kwargs["tools"], kwargs["tool_choice"] = plan.template_tools(), None
            structured = response_format_grammar(body.response_format)
            calls = plan.grammar()
            if calls is not None and (structured is not None or kwargs.get("grammar") is not None):
                raise APIError(400, "tools: a request offering tools takes no grammar or response_format beside them",
                               param="tools")
            if structured is not None:  # it replaces a grammar given beside it, as in llama_cpp's handlers
                param, kwargs["grammar"], kwargs["response_format"] = "response_format", structured, None
            if calls is not None:
                param, kwargs["grammar"] = "tools", calls
            exchange.plan = plan if plan.parses else None
        try:
            check_grammar(self.llm.vocab, kwargs.get("grammar"))
        except ValueError as e:
            raise APIError(400, str(e), param=param, code="invalid_grammar") from e
        return kwargs, prediction

    def memory_of(self, request: Request, body):
        """The cross-request memory a request drafts from: its API key's (where the server asks
        for keys), narrowed by its ``cache_salt``; the one shared memory where neither is given
        (plookup.index.scopes). None: the server keeps no memory."""
        if self.memories is None:
            return None
        key = request_key(request.headers) if self.keyed else None
        return self.memories.get(scope_of(key, getattr(body, "cache_salt", None)))

    def check_prediction_size(self, text: str) -> None:
        limit = self.limits.max_prediction_tokens
        size = len(text.encode("utf-8"))
        # A token is at least one byte: a short text needs no count; a long one is counted once.
        if size > limit and len(self.llm.tokenize(text.encode("utf-8"), add_bos=False)) > limit:
            raise APIError(400, f"the prediction is over the server's limit of {limit} tokens",
                           param="prediction", code="prediction_too_long")

    def prompt_of(self, create_name: str, kwargs: dict) -> PromptTokens:
        """The prompt (ValueError: refused), as llama_cpp's request preparation learned it. A chat
        is rendered as llama-server renders it, so that both answer one prompt alike, unless the
        template refuses a system message where it stands (Gemma's refuses a second one): then
        kwargs' messages are folded."""
        try:
            return self.probe.prompt(create_name, kwargs)
        except ValueError as e:
            folded = folded_system(kwargs["messages"]) if "messages" in kwargs else None
            if folded is None or PROMPT_OVER_CONTEXT.search(str(e)):
                raise
            kwargs["messages"] = folded
            return self.probe.prompt(create_name, kwargs)

    async def check_request(self, body, create_name: str, exchange: Exchange) -> tuple[Callable, dict, Optional[dict]]:
        """(create, its keyword arguments, prediction) of a request that passed every check that
        needs no model time, its prompt's length included (measured into `exchange`): its
        generation is ``create(**kwargs)``, a chat's from the prompt rendered here, not again."""
        kwargs, prediction = self.arguments(body, exchange)
        exchange.prepare(kwargs)
        kwargs["max_tokens"] = self.limits.capped(kwargs.get("max_tokens"))
        try:
            found = await run_in_threadpool(self.prompt_of, create_name, kwargs)
        except ValueError as e:
            raise model_error(e, body) from e
        exchange.prompt = found.tokens
        if exchange.plan is not None:
            end = self.llm.detokenize(exchange.prompt[-PROMPT_END:]).decode("utf-8", "ignore")
            exchange.answer = exchange.plan.answer(end)
        if found.completion is not None and completes_as_template_handler(self.llm, kwargs):
            return chat_from_completion(self.llm), found.completion, prediction
        return getattr(self.llm, create_name), kwargs, prediction

    async def respond(self, request: Request, body, create_name: str, exchange: Optional[Exchange] = None):
        """`exchange`: the request on its route, what the route adds to it and how it shapes the
        answer (default: OpenAI's, with the llama-server fields the /v1 routes take)."""
        exchange = exchange or Exchange(body if isinstance(body, LlamaOptions) else None, self.llm, self.model_name)
        create, kwargs, prediction = await self.check_request(body, create_name, exchange)
        memory = self.memory_of(request, body)

        def run(call, stream: bool = False):
            call.memory = memory
            return exchange.run(create, kwargs, call, stream)

        if body.stream:
            self.metrics.queue_wait.observe(await self.rpc_watch.unless_lost(self.gate.enter))
            return await self.start_stream(body, run, prediction, exchange)  # the stream leaves the gate
        call, result = await self.through_gate(request, body, run, prediction)
        if call.prediction:
            details = await run_in_threadpool(self.llm.prediction_details, call.prediction, completion_text(result))
            result["usage"]["completion_tokens_details"] = details
            self.metrics.record_prediction(details)
        answer = exchange.whole(result, call)
        self.metrics.record_timings(exchange.timings(call))
        return answer

    async def respond_each(self, request: Request, body: CompletionRequest, prompts: list) -> dict:
        """A completion of several prompts (not streamed), one choice each, as OpenAI answers: every
        prompt checked before any work, then generated one after another on one slot, as one
        request (its stats and prediction accounting count them all)."""
        exchanges = [Exchange(body, self.llm, self.model_name) for _ in prompts]
        checked = [await self.check_request(body.model_copy(update={"prompt": p}), "create_completion", exchange)
                    for p, exchange in zip(prompts, exchanges)]
        prediction = checked[0][2]
        memory = self.memory_of(request, body)

        def each(call):
            call.memory = memory
            return [exchange.run(create, kwargs, call) for exchange, (create, kwargs, _) in zip(exchanges, checked)]

        call, results = await self.through_gate(request, body, each, prediction)
        result = merge_completions(results)
        if call.prediction:
            details = [await run_in_threadpool(self.llm.prediction_details, call.prediction, completion_text(r))
                       for r in results]
            result["usage"]["completion_tokens_details"] = {k: sum(d[k] for d in details) for k in details[0]}
            self.metrics.record_prediction(result["usage"]["completion_tokens_details"])
        return result

    async def through_gate(self, request: Request, body, run, prediction):
        """(call, result) of a non-streamed request: it waits at the gate, generates, leaves the
        gate however that ends, and its generation's stats go to the metrics."""
        self.metrics.queue_wait.observe(await self.rpc_watch.unless_lost(self.gate.enter))
        try:
            call, result = await self.generate(request, run, prediction)
        except ValueError as e:
            raise model_error(e, body) from e
        finally:
            self.gate.leave()
        self.metrics.record_generation(call.stats.as_dict())
        return call, result

    async def generate(self, request: Request, run, prediction):
        """(call, result) of a non-streamed request, which ends at its next step once the client
        hangs up."""
        gone = threading.Event()

        def generate():
            with self.llm.request(prediction, cancelled=gone.is_set) as call:
                return call, run(call)

        refused: Optional[Exception] = None
        async with anyio.create_task_group() as group:
            group.start_soon(watch_disconnect, request, gone)
            try:
                done = await self.rpc_watch.in_thread(generate)
            except (ValueError, APIError) as e:  # raised outside the group, which would wrap it in a group
                refused = e
            finally:
                group.cancel_scope.cancel()
        if refused is not None:
            raise refused
        return done

    async def start_stream(self, body, run, prediction, exchange: Exchange):
        """Run the stream's first step before the response starts, so that its errors are a real
        status, unless the exchange opens at once (:meth:`.controls.Exchange.opening`): then its events
        go out first and every WAITING_EVERY seconds while the prompt is evaluated, and a failure
        is the stream's last event. The response leaves the gate when it ends, however it ends."""
        gone = threading.Event()

        def first_chunk():
            with self.llm.request(prediction, cancelled=gone.is_set) as call:
                chunks = run(call, stream=True)
            return call, chunks, next(chunks, None)

        opening = exchange.opening()
        if opening is None:
            try:
                started = await self.rpc_watch.in_thread(first_chunk)
            except ValueError as e:
                self.gate.leave()
                raise model_error(e, body) from e
            except BaseException:
                self.gate.leave()
                raise
            step = asyncio.get_running_loop().create_future()
            step.set_result(started)
        else:
            step = asyncio.ensure_future(self.rpc_watch.in_thread(first_chunk))
        text: list[str] = []

        async def events():
            try:
                if opening is not None:
                    async for event in opened(step, opening, exchange):
                        yield event
                call, chunks, first = step.result()
                if first is not None:
                    text.append(chunk_text(first))
                    for event in exchange.events(first):
                        yield event
                    while (chunk := await self.rpc_watch.in_thread(next, chunks, None)) is not None:
                        text.append(chunk_text(chunk))
                        for event in exchange.events(chunk):
                            yield event
                for event in exchange.closing(call):
                    yield event
            except ValueError as e:
                for event in exchange.failed(model_error(e, body)):
                    yield event
            except APIError as e:  # the RPC server was lost
                for event in exchange.failed(e):
                    yield event

        return ClosingEventSource(events(), lambda: self.stream_closed(step, exchange, "".join(text), gone), sep="\n")

    async def stream_closed(self, step: asyncio.Future, exchange: Exchange, text: str, gone: threading.Event) -> None:
        """A stream's end, however it ended: its generation stopped, the gate left, its stats kept."""
        gone.set()  # a generation step still running ends the stream at its next step
        started = None  # (call, chunks, first chunk) of a first step that ran
        try:
            await asyncio.wait({step})  # its thread owns the model until the step ends
            if not step.cancelled() and step.exception() is None:
                started = step.result()
                await run_in_threadpool(started[1].close)  # under the gate: its cleanup touches the cache
        finally:
            self.gate.leave()
        if started is None:
            return
        call = started[0]
        self.metrics.record_generation(call.stats.as_dict())
        self.metrics.record_timings(exchange.timings(call))
        if call.prediction:
            self.metrics.record_prediction(await run_in_threadpool(self.llm.prediction_details, call.prediction, text))


async def opened(step: asyncio.Future, opening: list[dict], exchange: Exchange):
    """A stream that opens at once: its opening events, then its waiting ones until `step` is done."""
    for event in opening:
        yield event
    while not (await asyncio.wait({step}, timeout=WAITING_EVERY))[0]:
        for event in exchange.waiting():
            yield event


LOCALHOST_ORIGINS = r"https?://(localhost|127\.0\.0\.1|\[::1\])(:\d+)?"


def create_app(llm: Llama, model_name: str, limits: Limits = Limits(), api_key: Optional[str] = None,
               cors_origins: Sequence[str] = ANY_ORIGIN, on_shutdown: Callable[[], None] = lambda: None,
               chat_template: Optional[str] = None, on_startup: Callable[[], None] = lambda: None) -> FastAPI:
    """The app serving `llm` as `model_name` to every request, whatever ``model`` it names (its chats
    rendered with `chat_template`, see :class:`Service`); a browser page from one of `cors_origins` may
    call it too: "*" any (llama-server's default), "localhost" this machine's pages, () none
    (same-origin only). `on_startup()` runs on the server's event loop as it starts, `on_shutdown()`
    when it shuts down. ``app.state.calibration``, where the serve command sets it, is said by /health."""
    metrics = Metrics(ROUTES | LLAMA_ROUTES | AGENT_ROUTES)
    metrics.watch_model(llm)
    service = Service(llm, model_name, limits, metrics, keyed=bool(api_key), chat_template=chat_template)
    @contextlib.asynccontextmanager
    async def lifespan(_app):
        service.rpc_watch.start()  # on the server's event loop
        on_startup()
        yield
        on_shutdown()

    app = FastAPI(title="plookup", lifespan=lifespan)
    app.state.memories = service.memories  # the serve command keeps them (--memory)
    app.state.model_name = model_name
    app.state.gate = service.gate  # the serve command's background measurement waits for idle moments
    app.state.calibration = None  # e.g. "measuring": the model decodes plainly until its figures are in
    install_error_handlers(app)
    add_middleware(app, limits, api_key, metrics, cors_origins)

    @app.post("/v1/completions")
    async def completions(request: Request, body: CompletionRequest):
        prompts = completion_prompts(body.prompt, llm.n_vocab())
        if len(prompts) > 1:
            if body.stream:
                raise APIError(400, f"prompt: a streamed completion takes one prompt, not {len(prompts)}",
                               param="prompt")
            return await service.respond_each(request, body, prompts)
        body.prompt = prompts[0]
        return await service.respond(request, body, "create_completion")

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request, body: ChatCompletionRequest):
        if body.logprobs and body.top_logprobs is None:
            body.top_logprobs = 0  # OpenAI's logprobs without alternatives (llama_cpp's handler gives none)
        return await service.respond(request, body, "create_chat_completion")

    listing = model_listing(llm, model_name, int(time.time()))
    app.get("/v1/models")(lambda: listing)

    @app.get("/metrics")
    async def metrics_text():
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    @app.get("/health")
    async def health():
        if service.rpc_watch.check() is not None:
            raise service.rpc_watch.error()
        calibration = app.state.calibration
        return {"status": "ok"} if calibration is None else {"status": "ok", "calibration": calibration}

    add_llama_routes(app, service)  # llama-server's own routes, and the /v1 ones without /v1
    add_agent_routes(app, service)
    return app


def add_middleware(app: FastAPI, limits: Limits, api_key: Optional[str], metrics: Metrics,
                   cors_origins: Sequence[str]) -> None:
    app.add_middleware(LimitBody, max_bytes=limits.max_body_bytes)  # added last runs first:
    if api_key:
        app.add_middleware(RequireKey, key=api_key)  # ... so the key is checked before the body,
    app.add_middleware(CountRequests, count=metrics.count_request)  # ... and every answer is counted
    if cors_origins:  # ... with CORS headers on it, and a preflight answered before the key is asked for
        allow_origins(app, cors_origins)


def allow_origins(app: FastAPI, cors_origins: Sequence[str]) -> None:
    """CORS as llama-server's: credentials allowed, the origin echoed back (starlette echoes it for
    "*" with credentials), its methods and every header; "localhost" stands for this machine's pages."""
    local = "localhost" in cors_origins
    app.add_middleware(CORSMiddleware, allow_origins=[o for o in cors_origins if o != "localhost"],
                       allow_origin_regex=LOCALHOST_ORIGINS if local else None, allow_credentials=True,
                       allow_methods=["GET", "POST", "DELETE", "OPTIONS"], allow_headers=["*"])


def model_listing(llm: Llama, model_name: str, created: int) -> dict:
    """llama-server's /v1/models: OpenAI's list (with llama.cpp's ``meta``), and Ollama's "models"
    beside it."""
    model = {"id": model_name, "aliases": [model_name], "tags": [], "object": "model", "created": created,
             "owned_by": "llamacpp", "meta": llm.model_meta(),
             "architecture": {"input_modalities": ["text"], "output_modalities": ["text"]}}
    details = {"parent_model": "", "format": "gguf", "family": "", "families": [""], "parameter_size": "",
               "quantization_level": ""}
    ollama = {"name": model_name, "model": model_name, "modified_at": "", "size": "", "digest": "", "type": "model",
              "description": "", "tags": [""], "capabilities": ["completion"], "parameters": "", "details": details}
    return {"models": [ollama], "object": "list", "data": [model]}
