"""llama-server's own routes on `plookup serve`, in llama-server's shapes, beside the /v1 ones.

For the clients that speak llama-server (llama.vim, llama.vscode, Continue's and Tabby's llama.cpp
providers, Zed): ``/completion`` (alias ``/completions``), ``/infill``, ``/tokenize``,
``/detokenize``, ``/apply-template``, ``/props``, ``/slots`` (read only), and the OpenAI routes
without their ``/v1`` (``/chat/completions``, ``/models``), as llama-server also serves them.
The wire formats are llama-server's (its README and tests): request fields with its defaults,
answers with the fields its clients read (``content``, ``tokens``, ``stop``, ``stop_type``,
``timings``, ``completion_probabilities``, ...), a stream of ``data: {"content", "stop", ...}``
events without a ``[DONE]``.

A generation goes through the same admission path as the /v1 routes (:meth:`Service.respond`:
API key, body limit, model name, context check, gate and queue, disconnects, metrics): the route
turns llama-server's body into llama_cpp.server's completion request and :class:`LlamaExchange`
shapes the answer. What differs from llama-server is said where it is done; a field plookup
cannot honour is a 400 naming it.
"""

from __future__ import annotations

import json
from typing import List, Optional, Union

import llama_cpp
from fastapi import FastAPI, Query, Request
from pydantic import BaseModel, Field, StrictStr, model_validator

from ...api.fim import check_fim, infill_prompt
from ...verify.chain import DEFAULT_ORDER, sampler_order
from .controls import DEFAULTS, Exchange, LlamaOptions, eog_tokens, indent_cut, pick_fields, stat_counts
from .errors import APIError
from .requests import ChatCompletionRequest, ChatMessage, CompletionRequest, Prediction, Tool

LLAMA_ROUTES = frozenset({
    "/completion", "/completions", "/infill", "/tokenize", "/detokenize", "/apply-template", "/props", "/slots",
    "/chat/completions", "/models",
})

class LlamaCompletionBody(LlamaOptions):
    """llama-server's ``/completion`` body (the sampling fields are llama_cpp's where it has them)."""

    model: Optional[str] = None
    prompt: Union[str, List[Union[int, str, List[Union[int, str]]]]] = ""
    temperature: float = DEFAULTS["temperature"]
    top_k: int = DEFAULTS["top_k"]
    top_p: float = Field(DEFAULTS["top_p"], ge=0, le=1)
    min_p: float = Field(DEFAULTS["min_p"], ge=0, le=1)
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    mirostat: int = Field(0, ge=0, le=2)
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.1
    stop: Optional[Union[str, List[str]]] = None
    stream: bool = False
    seed: int = DEFAULTS["seed"]
    logit_bias: Optional[Union[dict, list]] = None
    grammar: Optional[str] = None
    prediction: Optional[Prediction] = None  # OpenAI's Predicted Outputs, drafted as on the /v1 routes
    max_tokens: Optional[int] = Field(None, ge=0, exclude=True)  # twinny's; read where n_predict is not

    @model_validator(mode="after")
    def _length(self):
        """llama-server's rule (params_from_json_cmpl): n_predict, else max_completion_tokens, else
        max_tokens."""
        if self.n_predict is None:
            self.n_predict = self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens
        return self


class InfillChunk(BaseModel):
    """One of the other files' chunks: llama.vim's ring buffer and llama.vscode's send these."""

    text: StrictStr
    filename: StrictStr = "tmp"


class InfillBody(LlamaCompletionBody):
    """``/infill``: the text around the cursor, and chunks of other files."""

    input_prefix: StrictStr
    input_suffix: StrictStr
    input_extra: List[InfillChunk] = []
    prompt: StrictStr = ""  # text after the prefix that the answer continues (llama.vim: the cursor's line)


class TokenizeBody(BaseModel):
    content: StrictStr
    add_special: bool = False
    parse_special: bool = True
    with_pieces: bool = False


class DetokenizeBody(BaseModel):
    tokens: List[int]


class ApplyTemplateBody(BaseModel):
    # as the chat route takes them
    messages: List[ChatMessage]
    tools: Optional[List[Tool]] = None
    tool_choice: Optional[Union[str, dict]] = None


def piece_json(piece: bytes) -> Union[str, list[int]]:
    """A token's piece as llama-server gives it: its text, or its bytes where they are not UTF-8."""
    try:
        return piece.decode("utf-8")
    except UnicodeDecodeError:
        return list(piece)


def logit_bias_map(llm, bias) -> dict[str, float]:
    """llama-server's ``logit_bias`` (``[[id or text, value or false], ...]`` or ``{id: value}``)
    as llama_cpp.server's ``{"id": value}``; a text biases each of its tokens, false bans."""
    pairs = bias.items() if isinstance(bias, dict) else bias
    found: dict[str, float] = {}
    for pair in pairs:
        if isinstance(bias, dict):
            key, value = pair
        else:
            key, value = pair if isinstance(pair, list) and len(pair) == 2 else (None, None)
        if key is None or not (value is False or isinstance(value, (int, float))) or value is True:
            raise APIError(400, "logit_bias takes [[token id or text, bias or false], ...] or {token id: bias}",
                           param="logit_bias")
        value = float("-inf") if value is False else float(value)
        if isinstance(key, str) and not key.lstrip("-").isdigit():
            tokens = llm.tokenize(key.encode("utf-8"), add_bos=False, special=False)
        else:
            tokens = [int(key)]
        for token in tokens:
            if not 0 <= token < llm.n_vocab():
                raise APIError(400, f"logit_bias: token id {token} is outside the vocabulary", param="logit_bias")
            found[str(token)] = value
    return found


def stop_reason(llm, result: dict, tokens: list[int], eog: frozenset, stop: list[str], cut: bool) -> tuple[str, str]:
    """llama-server's (stop_type, stopping_word) of a completion that llama_cpp ended with
    `result`'s finish_reason after handing out `tokens`."""
    if tokens and tokens[-1] in eog:
        return "eos", ""
    if not cut and result["choices"][0]["finish_reason"] == "stop" and stop:
        text = result["choices"][0]["text"]
        rest = llm.detokenize([t for t in tokens if t not in eog], special=False).decode("utf-8", errors="ignore")
        rest = rest[len(text):] if rest.startswith(text) else rest
        word = next((s for s in stop if rest.startswith(s)), next((s for s in stop if s in rest), stop[0]))
        return "word", word
    return "limit", ""


class Completion:
    """One completion's record: llama_cpp's result and what the watch saw."""

    def __init__(self, result: dict, watch, emitted: list, counts: Optional[dict] = None):
        self.result, self.watch, self.emitted, self.counts = result, watch, emitted, counts
        self.tokens = watch.completion_tokens()
        self.all_tokens = watch.delivered()


class LlamaExchange(Exchange):
    """llama-server's answer to /completion and /infill (see the module)."""

    ORDER = DEFAULT_ORDER  # llama-server's chain, in its default order, unless greedy needs none

    def __init__(self, body: LlamaCompletionBody, llm, model_name: str, prompt_tokens: Optional[list[int]] = None):
        super().__init__(body, llm, model_name)
        self.body = body
        self.given_tokens = prompt_tokens  # the prompt as tokens (/infill's, a token prompt)
        self.records: list[Completion] = []
        self.finish: Optional[str] = None  # the stream's finish_reason
        self.call = None

    def openai_request(self, request_class):
        """llama_cpp.server's completion request for this body."""
        b = self.body
        if isinstance(b.prompt, str):
            prompt = b.prompt
        else:
            prompt = ""
        return request_class(
            model=b.model, prompt=prompt, max_tokens=None if b.n_predict is None or b.n_predict < 0 else b.n_predict,
            temperature=b.temperature, top_p=b.top_p, min_p=b.min_p, top_k=b.top_k, stop=b.stop, stream=b.stream,
            presence_penalty=b.presence_penalty, frequency_penalty=b.frequency_penalty,
            repeat_penalty=b.repeat_penalty, mirostat_mode=b.mirostat, mirostat_tau=b.mirostat_tau,
            mirostat_eta=b.mirostat_eta, grammar=b.grammar, logprobs=b.n_probs or None,
            logit_bias=logit_bias_map(self.llm, b.logit_bias) if b.logit_bias else None,
            seed=llama_cpp.LLAMA_DEFAULT_SEED if b.seed == -1 else b.seed,  # -1: a random seed, as llama-server's
            prediction=b.prediction,
        )

    def prepare(self, kwargs: dict) -> None:
        if self.given_tokens is not None:
            kwargs["prompt"] = self.given_tokens
        super().prepare(kwargs)

    def one(self, create, kwargs: dict, call) -> dict:
        """One of the request's n_cmpl completions (:meth:`Exchange.run` makes them one after
        another), kept with its own share of the call's stats for its answer."""
        before = stat_counts(call.stats)
        result = super().one(create, kwargs, call)
        self.watch.clock.stopped()
        emitted = list(call.logprobs.emitted) if call.logprobs is not None else []
        counts = {name: value - before[name] for name, value in stat_counts(call.stats).items()}
        self.records.append(Completion(result, self.watch, emitted, counts))
        return result

    # -- the answer

    def settings(self) -> dict:
        """llama-server's ``generation_settings`` (the request's, as served)."""
        b = self.body
        return {
            "n_ctx": self.llm.n_ctx(), "n_predict": -1 if b.n_predict is None else b.n_predict, "seed": b.seed,
            "temperature": b.temperature, "dynatemp_range": b.dynatemp_range,
            "dynatemp_exponent": b.dynatemp_exponent, "top_k": b.top_k, "top_p": b.top_p, "min_p": b.min_p,
            "typical_p": b.typical_p, "repeat_last_n": self.llm.last_n_tokens_size if b.repeat_last_n is None
            else b.repeat_last_n, "repeat_penalty": b.repeat_penalty, "presence_penalty": b.presence_penalty,
            "frequency_penalty": b.frequency_penalty, "mirostat": b.mirostat, "mirostat_tau": b.mirostat_tau,
            "mirostat_eta": b.mirostat_eta, "stop": self.stops(), "n_keep": b.n_keep, "ignore_eos": b.ignore_eos,
            "stream": b.stream, "n_probs": b.n_probs, "min_keep": b.min_keep, "grammar": b.grammar or "",
            "samplers": list(sampler_order(b.samplers) if b.samplers is not None else DEFAULT_ORDER),
            **self.speculative_settings(), "model": self.model_name,
        }

    def speculative_settings(self) -> dict:
        """The request's drafts as served, in llama-server's ``speculative.*`` keys (n_max: the
        drafter's own bound, or the request's below it)."""
        spec = self.body.speculative
        n_max = self.llm.max_draft
        if spec is not None and spec.n_max is not None:
            n_max = min(n_max, spec.n_max)
        return {"speculative": n_max > 0, "speculative.n_max": n_max,
                "speculative.n_min": spec.n_min if spec is not None else 0,
                "speculative.p_min": spec.p_min if spec is not None else 0.0}

    def slot_index(self, call=None) -> int:
        """The engine's slot that generates the request (0 before it has one)."""
        call = call or self.call
        generation = call.generation if call is not None else None
        return getattr(getattr(generation, "slot", None), "index", 0) if generation is not None else 0

    def stops(self) -> list[str]:
        stop = self.body.stop
        return [stop] if isinstance(stop, str) else list(stop or [])

    def probabilities(self, emitted) -> list[dict]:
        """llama-server's ``completion_probabilities`` of emitted tokens (values before sampling)."""

        def entry(token: int, logprob: float) -> dict:
            piece = self.llm.detokenize([token], special=True)
            text = piece.decode("utf-8", errors="replace")
            return {"id": token, "token": text, "bytes": list(piece), "logprob": logprob}

        return [{**entry(e.token, e.logprob), "top_logprobs": [entry(t, v) for t, v in e.top]} for e in emitted]

    def completion(self, record: Completion, call, index: int) -> dict:
        b, eog = self.body, self.watch.eog
        text = "" if self.warm_up else record.result["choices"][0]["text"]
        cut = indent_cut(text, b.n_indent) if b.n_indent > 0 else None
        if cut is not None:
            text = text[:cut]
        tokens = [] if self.warm_up else record.tokens
        stop_type, word = ("limit", "") if self.warm_up else stop_reason(
            self.llm, record.result, record.all_tokens, eog, self.stops(), cut is not None)
        slot = self.slot_index(call)
        timings = self.timings(call, record.watch, record.counts)
        if self.warm_up:
            timings.update(predicted_n=0, predicted_per_second=0.0, predicted_per_token_ms=0.0)
        answer = {
            "index": index, "content": text, "tokens": tokens if b.return_tokens else [], "id_slot": slot,
            "stop": True, "model": self.model_name, "tokens_predicted": len(tokens),
            "tokens_evaluated": len(self.prompt), "generation_settings": self.settings(),
            "prompt": self.llm.detokenize(self.prompt, special=True).decode("utf-8", errors="replace"),
            "has_new_line": "\n" in text, "truncated": len(self.prompt) + len(record.all_tokens) >= self.llm.n_ctx(),
            "stop_type": stop_type, "stopping_word": word, "timings": timings,
            # llama-server's: the tokens the slot's cache holds after the answer (the newest
            # token sampled is never evaluated)
            "tokens_cached": len(self.prompt) + max(0, len(record.all_tokens) - 1),
        }
        if b.n_probs > 0 and not self.warm_up:
            answer["completion_probabilities"] = self.probabilities(record.emitted[: len(tokens)])
        return pick_fields(answer, b.response_fields)

    def whole(self, result: dict, call):
        answers = [self.completion(record, call, i) for i, record in enumerate(self.records)]
        return answers[0] if len(answers) == 1 else answers

    def timings(self, call, watch=None, counts=None) -> dict:
        return super().timings(call, watch or (self.records[-1].watch if self.records else self.watch), counts)

    def events(self, chunk: dict) -> list[dict]:
        """The stream's events for one of llama_cpp's chunks: its text, less what ``n_indent`` cuts."""
        b = self.body
        choice = chunk["choices"][0]
        self.finish = choice.get("finish_reason") or self.finish
        if self.warm_up or self.cut_at is not None:
            return []
        # The budget may end the completion on a token of a step that handed out more (drafted
        # tokens after it): llama_cpp still streams their text; the completion stops at that token.
        content = self.visible(choice["text"] or "")
        done = self.stream_tokens
        tokens = self.next_tokens()
        if not content and not tokens:
            return []
        event = {"index": 0, "content": content, "tokens": tokens, "stop": False, "id_slot": self.slot_index(),
                 "tokens_predicted": done + len(tokens), "tokens_evaluated": len(self.prompt)}
        if b.n_probs > 0:
            event["completion_probabilities"] = self.probabilities(self.watch_emitted()[done : done + len(tokens)])
        if b.timings_per_token:
            event["timings"] = self.partial_timings()
        return [{"data": json.dumps(event)}]

    def watch_emitted(self) -> list:
        logprobs = self.call.logprobs if self.call is not None else None
        return list(logprobs.emitted) if logprobs is not None else []

    def closing(self, call) -> list[dict]:
        """The stream's last event: ``stop: true`` with the completion's fields (llama-server sends
        no ``[DONE]``)."""
        self.watch.clock.stopped()
        last = self.last_result(call)
        record = Completion(last, self.watch, self.watch_emitted())
        answer = self.completion(record, call, 0)
        answer.update(content="", tokens=[])
        answer.pop("completion_probabilities", None)
        return [{"data": json.dumps(answer)}]

    def last_result(self, call) -> dict:
        """llama_cpp's whole-result fields a stream lacks, from what it sent."""
        return {"choices": [{"text": self.sent, "finish_reason": self.finish or "length"}]}

    def watch_tokens(self, call):
        self.call = call  # its logprobs, set by create_completion, are read as the stream goes
        return super().watch_tokens(call)


def add_llama_routes(app: FastAPI, service) -> None:
    """Register llama-server's routes on `app`, served by `service` (:class:`.app.Service`)."""
    eog_tokens(service.llm)  # a walk over the vocabulary, done now rather than in the first request
    add_generation_routes(app, service)
    add_token_routes(app, service)
    add_state_routes(app, service)
    add_unversioned_routes(app)


def check_token_ids(llm, tokens: list[int], field: str) -> None:
    """A 400 naming `field` when one of `tokens` is outside the model's vocabulary."""
    bad = [t for t in tokens if not 0 <= t < llm.n_vocab()]
    if bad:
        raise APIError(400, f"{field}: token id {bad[0]} is outside the vocabulary of {llm.n_vocab()}", param=field)


def prompt_ids(llm, parts: list, field: str) -> list[int]:
    """llama-server's prompt of token ids and texts mixed, as tokens: each text tokenized with its
    special tokens parsed, the first with the model's BOS where it leads the prompt."""
    if not parts:
        raise APIError(400, f"{field}: an empty list holds no prompt", param=field)
    tokens: list[int] = []
    for i, part in enumerate(parts):
        if isinstance(part, str):
            tokens += llm.tokenize(part.encode("utf-8"), add_bos=i == 0, special=True)
        elif isinstance(part, int) and not isinstance(part, bool):
            tokens.append(part)
        else:
            raise APIError(400, f"{field}: a prompt is a text, token ids, or both mixed", param=field)
    check_token_ids(llm, tokens, field)
    return tokens


def add_generation_routes(app: FastAPI, service) -> None:
    """``/completion`` (and ``/completions``) and ``/infill``: generations, through
    :meth:`Service.respond` as the /v1 routes go, shaped by :class:`LlamaExchange`."""
    llm, model_name = service.llm, service.model_name

    async def complete(request: Request, body: LlamaCompletionBody, tokens: Optional[list[int]] = None):
        exchange = LlamaExchange(body, llm, model_name, tokens)
        return await service.respond(request, exchange.openai_request(CompletionRequest), "create_completion", exchange)

    @app.post("/completion")
    @app.post("/completions")
    async def completion(request: Request, body: LlamaCompletionBody):
        """One prompt (a string, token ids, or both mixed), or several in a list: an answer each,
        in an array, as llama-server answers them."""
        prompt = body.prompt
        if isinstance(prompt, str):
            return await complete(request, body)
        if not prompt:
            raise APIError(400, "prompt: an empty list holds no prompt", param="prompt")
        if any(isinstance(part, int) for part in prompt):  # one prompt of tokens (and texts)
            return await complete(request, body, prompt_ids(llm, prompt, "prompt"))
        if body.stream and len(prompt) > 1:
            raise APIError(400, "several prompts are served without stream", param="prompt")
        # Every prompt checked before any is generated, as llama-server tokenizes them all first: a
        # bad one is a 400 at once, not after the others' answers were computed and thrown away.
        ids = [None if isinstance(one, str) else prompt_ids(llm, one, f"prompt.{i}" if len(prompt) > 1 else "prompt")
               for i, one in enumerate(prompt)]
        answers = []
        for one, tokens in zip(prompt, ids):
            single = body.model_copy(update={"prompt": one if isinstance(one, str) else ""})
            answer = await complete(request, single, tokens)
            if len(prompt) == 1:
                return answer
            answers += answer if isinstance(answer, list) else [answer]
        return answers

    @app.post("/infill")
    async def infill(request: Request, body: InfillBody):
        try:
            fim = check_fim(llm, model_name)
        except ValueError as e:
            raise APIError(400, str(e), param="model", code="infill_not_supported") from e
        extra = [(chunk.filename, chunk.text) for chunk in body.input_extra]
        n_predict = -1 if body.n_predict is None else body.n_predict
        # sized by the server's batch (-b), as llama-server's (llama_cpp caps it at the context)
        tokens = infill_prompt(llm, fim, body.input_prefix, body.input_suffix, body.prompt, extra, n_predict,
                               llm.n_batch)
        return await complete(request, body, tokens)


def add_token_routes(app: FastAPI, service) -> None:
    """``/tokenize``, ``/detokenize`` and ``/apply-template``: the model's tokenizer and chat
    template, no generation."""
    llm = service.llm

    @app.post("/tokenize")
    async def tokenize(body: TokenizeBody):
        tokens = llm.tokenize(body.content.encode("utf-8"), add_bos=body.add_special, special=body.parse_special)
        if not body.with_pieces:
            return {"tokens": tokens}
        return {"tokens": [{"id": t, "piece": piece_json(llm.detokenize([t], special=True))} for t in tokens]}

    @app.post("/detokenize")
    async def detokenize(body: DetokenizeBody):
        check_token_ids(llm, body.tokens, "tokens")
        return {"content": llm.detokenize(body.tokens, special=True).decode("utf-8", errors="replace")}

    @app.post("/apply-template")
    async def apply_template(body: ApplyTemplateBody):
        # The chat route's own preparation, stopped where generation would start: the same prompt.
        chat = ChatCompletionRequest(messages=body.messages, tools=body.tools, tool_choice=body.tool_choice)
        kwargs, _ = service.arguments(chat, Exchange(chat, llm, service.model_name))
        try:
            tokens = service.prompt_of("create_chat_completion", kwargs).tokens
        except ValueError as e:
            raise APIError(400, str(e), param="messages") from e
        return {"prompt": llm.detokenize(tokens, special=True).decode("utf-8", errors="replace")}


def add_state_routes(app: FastAPI, service) -> None:
    """``/props`` and ``/slots`` (read only): the server's settings and its slots, in llama-server's
    shapes."""
    llm, model_name = service.llm, service.model_name

    def slot(index: int, busy: bool) -> dict:
        defaults = LlamaExchange(LlamaCompletionBody(), llm, model_name).settings()
        return {
            "id": index, "id_task": -1, "n_ctx": llm.n_ctx(), "speculative": True, "is_processing": busy,
            "params": defaults, "prompt": "",
            "next_token": {"has_next_token": busy, "has_new_line": False, "n_remain": -1, "n_decoded": 0,
                           "stopping_word": ""},
        }

    @app.get("/props")
    async def props():
        return {
            "default_generation_settings": slot(0, False), "total_slots": llm.parallel,
            "model_path": llm.model_path, "model_alias": model_name,
            "chat_template": llm.metadata.get("tokenizer.chat_template", ""), "chat_template_caps": {},
            "modalities": {"vision": False, "video": False, "audio": False},
            "bos_token": token_text(llm, llm.token_bos()), "eos_token": token_text(llm, llm.token_eos()),
            "endpoint_slots": True, "endpoint_props": True, "endpoint_metrics": True,
            "build_info": f"plookup {plookup_version()}", "is_sleeping": False,
        }

    @app.get("/slots")
    async def slots(fail_on_no_slot: int = Query(0)):
        busy = llm.busy_slots()
        if fail_on_no_slot and busy >= llm.parallel:
            raise APIError(503, "no slot available", type="unavailable_error", code="no_slot_available")
        return [slot(i, i < busy) for i in range(llm.parallel)]


def token_text(llm, token: int) -> str:
    """A special token's text, as llama-server's /props gives bos_token and eos_token ("" for none)."""
    if token < 0:
        return ""
    return llm.detokenize([token], special=True).decode("utf-8", errors="replace")


def add_unversioned_routes(app: FastAPI) -> None:
    """The OpenAI routes without their /v1, as llama-server also serves them: the same handlers
    (the /v1 routes must be registered already)."""
    for path, alias in (("/v1/chat/completions", "/chat/completions"), ("/v1/models", "/models")):
        route = next(r for r in app.router.routes if getattr(r, "path", None) == path)
        app.add_api_route(alias, route.endpoint, methods=list(route.methods))


def plookup_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("plookup")
    except PackageNotFoundError:
        return "dev"
