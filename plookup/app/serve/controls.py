"""llama-server's request fields on every route, and a request's exchange on its route: its
arguments, its call and the shape of its answer.

llama.vim, llama.vscode and other llama.cpp clients send llama-server's own fields to the OpenAI
routes too (``n_predict``, ``samplers``, ``t_max_predict_ms``, ``response_fields``, ...).
:class:`LlamaOptions` takes them beside llama_cpp.server's OpenAI schemas: a field is honoured as
llama-server honours it, accepted where llama-server gives it no effect either (``t_max_prompt_ms``,
``id_slot``, ``n_keep``: plookup places requests on slots and never shifts a context), or refused
with a 400 naming it, never dropped. They are kept out of the create_* arguments; an :class:`Exchange`
passes on what they mean.

An :class:`Exchange` is what a route does around the one admission path (:meth:`Service.respond`):
it adds to the create_* arguments, sets up the request's :class:`plookup.api.call.Call` (its
sampler chain, a time budget, a watch on the tokens handed out, for timings), and shapes the
result and the stream's events. This one is OpenAI's, for the /v1 routes; llama-server's own
routes (/completion, /infill) have theirs in :mod:`.llama_routes`.
"""

from __future__ import annotations

import json
import time
from typing import Any, List, Optional, Union

import llama_cpp
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ...api.fim import check_fim, infill_prompt
from ...draft.values import Speculative
from ...verify.chain import DEFAULT_ORDER, Chain, sampler_order
from .errors import APIError, error_event
from .toolcalls.grammars import loosened

# llama-server's one-letter sampler names (its `--sampling-seq`)
SAMPLER_LETTERS = {"e": "penalties", "d": "dry", "s": "top_n_sigma", "k": "top_k", "y": "typ_p", "p": "top_p",
                   "m": "min_p", "x": "xtc", "t": "temperature", "i": "infill"}
# llama-server's sampling defaults (its README, "/completion"; /props) where llama_cpp.server's
# schema differs: its repeat_penalty 1.1 would penalise every repeated token of a request that sets
# none, so greedy text would not be llama-server's, and a copy (an edit, a proofread) least of all.
DEFAULTS = dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.0, seed=-1)
MAX_COMPLETIONS = 8  # n_cmpl: completions of one prompt per request (llama.vscode sends 1-4)
NOT_SERVED = {
    "post_sampling_probs": "plookup gives n_probs as the model's own probabilities (llama-server's default), "
                           "not after the sampler chain",
    "return_progress": "plookup streams no prompt-processing progress",
    "lora": "plookup serve loads no LoRA adapters",
}


class StreamOptions(BaseModel):
    include_usage: bool = False


class SpeculativeOptions(BaseModel):
    """llama-server's ``speculative`` field: this request's drafts (see plookup.draft.values.Speculative)."""

    model_config = ConfigDict(extra="forbid")
    n_max: Optional[int] = Field(None, ge=0)  # None: the drafter's own bound; 0: plain decoding
    n_min: int = Field(0, ge=0)
    p_min: float = Field(0.0, ge=0, le=1)


class LlamaOptions(BaseModel):
    """llama-server's request fields beyond OpenAI's, with its defaults (its README, "/completion")."""

    repeat_penalty: float = Field(DEFAULTS["repeat_penalty"], ge=0)
    n_predict: Optional[int] = Field(None, ge=-1, exclude=True)
    # OpenAI's newer name for max_tokens (Zed sends it): llama-server reads n_predict, else this,
    # else max_tokens, on every route
    max_completion_tokens: Optional[int] = Field(None, ge=0, exclude=True)
    n_keep: int = Field(0, ge=-1, exclude=True)
    n_discard: int = Field(0, ge=0, exclude=True)
    n_cache_reuse: int = Field(0, ge=0, exclude=True)
    # vLLM's: requests draft only from the memory of the requests that sent the same salt (and key)
    cache_salt: Optional[str] = Field(None, exclude=True)
    samplers: Optional[Union[List[str], str]] = Field(None, exclude=True)
    typical_p: float = Field(1.0, exclude=True)
    repeat_last_n: Optional[int] = Field(None, ge=-1, exclude=True)
    dry_multiplier: float = Field(0.0, ge=0, exclude=True)
    dry_base: float = Field(1.75, ge=1, exclude=True)
    dry_allowed_length: int = Field(2, ge=0, exclude=True)
    dry_penalty_last_n: int = Field(-1, ge=-1, exclude=True)
    dry_sequence_breakers: Optional[List[str]] = Field(None, exclude=True)
    xtc_probability: float = Field(0.0, ge=0, le=1, exclude=True)
    xtc_threshold: float = Field(0.1, exclude=True)
    top_n_sigma: float = Field(-1.0, exclude=True)
    dynatemp_range: float = Field(0.0, ge=0, exclude=True)
    dynatemp_exponent: float = Field(1.0, exclude=True)
    min_keep: int = Field(0, ge=0, exclude=True)
    ignore_eos: bool = Field(False, exclude=True)
    n_probs: int = Field(0, ge=0, exclude=True)
    post_sampling_probs: bool = Field(False, exclude=True)
    cache_prompt: bool = Field(True, exclude=True)
    id_slot: int = Field(-1, ge=-1, exclude=True)
    return_tokens: bool = Field(False, exclude=True)
    t_max_prompt_ms: int = Field(-1, exclude=True)
    t_max_predict_ms: int = Field(0, exclude=True)
    n_indent: int = Field(0, ge=0, exclude=True)
    n_cmpl: int = Field(1, ge=1, le=MAX_COMPLETIONS, exclude=True)
    response_fields: Optional[List[str]] = Field(None, exclude=True)
    json_schema: Optional[Union[dict, bool]] = Field(None, exclude=True)
    timings_per_token: bool = Field(False, exclude=True)
    return_progress: bool = Field(False, exclude=True)
    lora: Optional[List[dict]] = Field(None, exclude=True)
    stream_options: Optional[StreamOptions] = Field(None, exclude=True)
    speculative: Optional[SpeculativeOptions] = Field(None, exclude=True)

    @field_validator("post_sampling_probs", "return_progress", "lora")
    @classmethod
    def _not_served(cls, value, info):
        if value:
            raise ValueError(f"{info.field_name} is not served: {NOT_SERVED[info.field_name]}")
        return value

    @field_validator("samplers")
    @classmethod
    def _known_samplers(cls, samplers):
        if isinstance(samplers, str):  # llama-server's letters, "kfypmt"
            unknown = sorted(set(samplers) - set(SAMPLER_LETTERS))
            if unknown:
                raise ValueError(f"unknown sampler letter(s) {''.join(unknown)!r}; known: {''.join(SAMPLER_LETTERS)}")
            return [SAMPLER_LETTERS[letter] for letter in samplers]
        if samplers is not None:
            sampler_order(samplers)
        return samplers

    @field_validator("json_schema")
    @classmethod
    def _schema_converts(cls, schema):
        if schema is not None:
            json_schema_grammar(schema)
        return schema


def json_schema_grammar(schema) -> str:
    """The GBNF grammar of a JSON schema (llama_cpp's converter, as llama-server's); ``{}`` or
    true: any JSON."""
    from llama_cpp.llama_grammar import JSON_GBNF, json_schema_to_gbnf

    if schema is True or schema == {}:
        return JSON_GBNF
    try:
        return json_schema_to_gbnf(json.dumps(loosened(schema)))  # (bounds a grammar can hold)
    except Exception as e:  # the converter raises what it meets (KeyError, ValueError, ...)
        raise ValueError(f"the JSON schema cannot be turned into a grammar: {e!r}") from e


def eog_tokens(llm) -> frozenset[int]:
    """Every end-of-generation token of the model's vocabulary (llama-server's ignore_eos bans them all)."""
    return llm.eog_tokens()


class Clock:
    """When a generation was asked for, handed out its first token, and ended (perf_counter)."""

    def __init__(self):
        self.start = self.first = self.end = None

    def started(self) -> None:
        self.start, self.first, self.end = time.perf_counter(), None, None

    def token(self) -> None:
        if self.first is None:
            self.first = time.perf_counter()

    def stopped(self) -> None:
        if self.end is None:
            self.end = time.perf_counter()

    def prompt_seconds(self) -> float:
        return ((self.first or self.end or self.start) - self.start) if self.start is not None else 0.0

    def predicted_seconds(self) -> float:
        return (self.end - self.first) if self.first is not None and self.end is not None else 0.0


class Watch:
    """The tokens one completion handed out (and when), and llama-server's two ends of a code
    completion: its time budget (``t_max_predict_ms``: on a token whose text holds a newline, once
    `budget` seconds have passed since the first token; that token is the completion's last, and
    tokens the same step drafted after it are not the completion's, as llama-server's own loop
    stops there) and its indentation (``n_indent``: a line after the first that starts less
    indented, see :func:`indent_cut`), each ending the generation at the engine's next step."""

    def __init__(self, llm, budget: Optional[float], eog: frozenset, n_indent: int = 0):
        self.llm, self.budget, self.eog, self.n_indent = llm, budget, eog, n_indent
        self.tokens: list[int] = []
        self.clock = Clock()
        self.text, self.newline, self.indent_ended = b"", False, False
        self.cut: Optional[int] = None  # the tokens the budget ended the completion after

    def start(self) -> None:
        self.tokens, self.text, self.newline, self.indent_ended, self.cut = [], b"", False, False, None
        self.clock.started()

    def __call__(self, token: int) -> None:
        self.clock.token()
        self.tokens.append(token)
        if self.cut is not None:
            return  # after the budget's end: handed out in the same step, not the completion's
        if (self.budget is not None or self.n_indent) and token not in self.eog:
            piece = self.llm.detokenize([token], prev_tokens=self.tokens[:-1])
            self.text += piece
            self.newline = self.newline or b"\n" in self.text
            if self.budget is not None and b"\n" in piece and time.perf_counter() - self.clock.first > self.budget:
                self.cut = len(self.tokens)
            if self.n_indent and self.newline and not self.indent_ended:
                self.indent_ended = indent_cut(self.text.decode("utf-8", errors="ignore"), self.n_indent) is not None

    @property
    def watching(self) -> bool:
        return self.budget is not None or self.n_indent > 0

    def ended(self) -> bool:
        return self.cut is not None or self.indent_ended

    def delivered(self) -> list[int]:
        """The completion's tokens, its end-of-generation token included (what the budget left)."""
        return list(self.tokens if self.cut is None else self.tokens[: self.cut])

    def completion_tokens(self) -> list[int]:
        """The completion's tokens as llama_cpp counts them (an end-of-generation token is not one)."""
        tokens = self.delivered()
        return tokens[:-1] if tokens and tokens[-1] in self.eog else tokens


class Exchange:
    """A request on an OpenAI route (the /v1 ones) and its answer in OpenAI's shape, with
    llama-server's fields those routes take (see the module): as llama-server serves them there,
    ``n_probs`` asks for OpenAI's logprobs, ``n_cmpl`` for that many choices, ``timings_per_token``
    puts ``timings`` in every chunk, ``n_indent`` and ``t_max_predict_ms`` end the text, and
    ``return_tokens`` adds each choice's ``tokens``."""

    def __init__(self, options: Optional[LlamaOptions], llm, model_name: str):
        self.options, self.llm, self.model_name = options, llm, model_name
        self.prompt: list[int] = []  # the prompt's tokens, measured before the gate
        self.watch: Optional[Watch] = None
        self.warm_up = False
        self.chain: Optional[Chain] = None
        self.last_chunk: Optional[dict] = None
        self.hung_up = None  # the call's own cancellation predicate (the client hung up)
        self.sent, self.shown = "", 0  # a stream's text so far, and what of it went out (its ends may cut it)
        self.cut_at: Optional[int] = None  # where n_indent cut the stream's text
        self.stream_tokens = 0  # the stream's tokens that went out in events
        self.plan = None  # a chat's tools and reasoning, decided at admission (.chat.ToolPlan)
        self.answer = None  # its answer read for tool calls and reasoning (.chat.Answer); None: its text
        param = "n_cmpl"
        n = getattr(options, "n", None) or 1  # OpenAI's n: that many choices, served as n_cmpl
        if n != 1:
            param = "n"
            if not 1 <= n <= MAX_COMPLETIONS:
                raise APIError(400, f"n: 1 to {MAX_COMPLETIONS} choices are served, not {n}", param="n")
            if "n_cmpl" in options.model_fields_set and options.n_cmpl != n:
                raise APIError(400, f"n ({n}) and n_cmpl ({options.n_cmpl}) ask for different numbers of choices",
                               param="n")
            options.n_cmpl = n
        if options is not None and options.n_cmpl != 1 and getattr(options, "stream", False):
            raise APIError(400, f"{param} > 1 is served without stream", param=param)

    # -- before the gate

    def prepare(self, kwargs: dict) -> None:
        """Add to the create_* keyword arguments what the llama-server fields mean."""
        if kwargs.get("suffix") is not None:
            self.fill_in_the_middle(kwargs)
        o = self.options
        if o is None:
            return
        if o.n_predict is not None and "n_predict" in o.model_fields_set and "max_tokens" not in o.model_fields_set:
            kwargs["max_tokens"] = None if o.n_predict < 0 else o.n_predict
        elif o.max_completion_tokens is not None and "n_predict" not in o.model_fields_set:
            kwargs["max_tokens"] = o.max_completion_tokens
        if kwargs.get("max_tokens") == 0 and o.n_predict == 0:
            # llama-server's warm-up: the prompt into the cache, nothing generated. llama_cpp reads
            # 0 as "up to the context": one token, not shown.
            self.warm_up, kwargs["max_tokens"] = True, 1
        if o.n_probs > 0 and not kwargs.get("logprobs"):  # llama-server's n_probs, as OpenAI asks for it
            if "messages" in kwargs:
                kwargs.update(logprobs=True, top_logprobs=o.n_probs)
            else:
                kwargs["logprobs"] = o.n_probs
        if o.json_schema is not None:
            if kwargs.get("grammar") is not None:
                raise APIError(400, "give either json_schema or grammar, not both", param="json_schema")
            kwargs["grammar"] = llama_cpp.LlamaGrammar.from_string(json_schema_grammar(o.json_schema), verbose=False)
        kwargs["typical_p"] = o.typical_p
        self.chain = self.sampler_chain(kwargs)

    def fill_in_the_middle(self, kwargs: dict) -> None:
        """OpenAI's ``suffix`` (Tabby's OpenAI mode sends it): the prompt /infill would build, from
        the model's own FIM tokens (llama_cpp's own FIM prompt puts token 0 for each of them)."""
        try:
            fim = check_fim(self.llm, self.model_name)
        except ValueError as e:
            raise APIError(400, str(e), param="suffix", code="infill_not_supported") from e
        if not isinstance(kwargs.get("prompt"), str):
            raise APIError(400, "a prompt with a suffix must be a string", param="prompt")
        max_tokens = kwargs.get("max_tokens")
        n_predict = max_tokens if isinstance(max_tokens, int) and max_tokens > 0 else -1
        kwargs["prompt"] = infill_prompt(self.llm, fim, kwargs["prompt"], kwargs["suffix"], n_predict=n_predict,
                                         n_batch=self.llm.n_batch)
        kwargs["suffix"] = None

    ORDER: Optional[tuple[str, ...]] = None  # the chain when a request lists no samplers (None: llama_cpp's)

    def sampler_chain(self, kwargs: dict) -> Optional[Chain]:
        """llama-server's chain where the request asks for more than llama_cpp's fixed chain does,
        with `kwargs`' temperature and penalties set as that chain needs (None: llama_cpp's own
        chain, or plookup's argmax where it picks the same tokens)."""
        o, llm = self.options, self.llm
        order = sampler_order(o.samplers) if o.samplers is not None else self.ORDER
        bias = dict.fromkeys(eog_tokens(llm), float("-inf")) if o.ignore_eos else {}
        last_n = o.repeat_last_n if o.repeat_last_n is not None else llm.last_n_tokens_size
        last_n = llm.n_ctx() if last_n == -1 else last_n
        penalised = (kwargs.get("repeat_penalty", 1.0) != 1.0 or kwargs.get("frequency_penalty")
                     or kwargs.get("presence_penalty"))
        # a lazy grammar (a tool call's) is a sampler llama_cpp's chain cannot hold
        lazy = getattr(kwargs.get("grammar"), "patterns", None) is not None
        extra = (bias or o.dry_multiplier or o.xtc_probability > 0 or o.top_n_sigma > 0 or o.dynatemp_range > 0
                 or o.min_keep > 1 or lazy)
        if order is None and not extra and not (penalised and last_n != llm.last_n_tokens_size):
            return None  # (a logit_bias stays llama_cpp.server's, a Python processor)
        for token, value in (kwargs.pop("logit_bias", None) or {}).items():  # into the chain's own sampler
            bias[int(token)] = bias.get(int(token), 0.0) + float(value)
        chain = Chain(
            order=order if order is not None else DEFAULT_ORDER, logit_bias=bias, penalty_last_n=last_n,
            dry_multiplier=o.dry_multiplier, dry_base=o.dry_base, dry_allowed_length=o.dry_allowed_length,
            dry_penalty_last_n=o.dry_penalty_last_n,
            dry_sequence_breakers=tuple(o.dry_sequence_breakers or Chain.dry_sequence_breakers),
            xtc_probability=o.xtc_probability, xtc_threshold=o.xtc_threshold, top_n_sigma=o.top_n_sigma,
            dynatemp_range=o.dynatemp_range, dynatemp_exponent=o.dynatemp_exponent, min_keep=o.min_keep,
        )
        mirostat = kwargs.get("mirostat_mode", 0)
        if chain.greedy(kwargs.get("temperature", 0.8), mirostat):
            kwargs["temperature"] = 0.0  # llama_cpp would draw at a temperature < 0
            before = chain.order[: chain.order.index("temperature")]
            if "penalties" not in before:
                kwargs.update(repeat_penalty=1.0, frequency_penalty=0.0, presence_penalty=0.0)
                penalised = False
            # What runs before the temperature can move the argmax only as these do; else the
            # argmax of llama_cpp's greedy chain (penalties, grammar) is the same token.
            moves = (bias or (o.dry_multiplier and "dry" in before) or (o.xtc_probability > 0 and "xtc" in before)
                     or "infill" in before or (penalised and last_n != llm.last_n_tokens_size) or lazy)
            return chain if moves else None
        if "temperature" not in chain.order and not mirostat:
            kwargs["temperature"] = 1.0  # not in the chain: a draw from the truncated distribution as it is
        return chain

    # -- under the gate, in the request's call

    def run(self, create, kwargs: dict, call, stream: bool = False):
        """``create(**kwargs)`` as this request's generation, inside its `call`: ``n_cmpl`` of
        them one after another on the call's slot (the prompt cached after the first), one
        choice each."""
        if stream:
            self.begin(call)
            return create(**kwargs, stream=stream)
        results = [self.one(create, kwargs, call) for _ in range(self.options.n_cmpl if self.options else 1)]
        if len(results) == 1:
            return results[0]
        return merge_completions(results, one_prompt=True)

    def begin(self, call) -> None:
        """Set up `call` for the next completion: its drafts' bounds, its cache reuse (the server's
        --cache-reuse unless the body says), and a fresh watch."""
        if self.options is not None and self.options.speculative is not None:
            call.speculative = Speculative(**self.options.speculative.model_dump())
        if self.options is not None and "n_cache_reuse" in self.options.model_fields_set:
            call.cache_reuse = self.options.n_cache_reuse
        self.watch = self.watch_tokens(call)
        self.watch.start()

    def one(self, create, kwargs: dict, call) -> dict:
        """One whole completion, its text as the watch ended it."""
        self.begin(call)
        result = create(**kwargs)
        if self.watch.ended():
            self.text_from_tokens(result)
        if self.options is not None and self.options.return_tokens:
            result["choices"][0]["tokens"] = self.watch.completion_tokens()
        return result

    def text_from_tokens(self, result: dict) -> None:
        """llama_cpp sets a whole completion's text where it stops it (its length, a stop, the end of
        text); a generation the watch ended stops from outside, and llama_cpp leaves its text empty.
        ``n_indent`` cuts it where the first line indented less begins."""
        tokens = self.watch.completion_tokens()
        text = self.llm.detokenize(tokens, prev_tokens=self.prompt or None).decode("utf-8", errors="ignore")
        cut = indent_cut(text, self.watch.n_indent) if self.watch.n_indent > 0 else None
        text = text if cut is None else text[:cut]
        choice = result["choices"][0]
        if "text" in choice:
            choice["text"] = text
        else:
            choice["message"]["content"] = text

    def watch_tokens(self, call) -> Watch:
        o = self.options
        budget = o.t_max_predict_ms / 1000 if o is not None and o.t_max_predict_ms > 0 else None
        watch = Watch(self.llm, budget, eog_tokens(self.llm), o.n_indent if o is not None else 0)
        call.chain, call.on_token = self.chain, watch
        if watch.watching:
            if self.hung_up is None:  # the client's, kept: each completion of the call has its own ends
                self.hung_up = call.cancelled or (lambda: False)
            hung_up = self.hung_up
            call.cancelled = lambda: hung_up() or watch.ended()
        return watch

    # -- the answer

    def timings(self, call, watch: Optional[Watch] = None, counts: Optional[dict] = None) -> dict:
        """llama-server's ``timings`` of a generation, with its speculative decoding counts
        (`counts`: one completion's share of the call's stats, where it made several)."""
        watch = watch or self.watch
        clock, stats = watch.clock, counts or stat_counts(call.stats)
        clock.stopped()
        prompt_n, predicted_n = stats["prefill_tokens"], len(watch.completion_tokens())
        prompt_ms, predicted_ms = clock.prompt_seconds() * 1000, clock.predicted_seconds() * 1000
        return {
            "cache_n": max(0, len(self.prompt) - prompt_n),  # reused: the common prefix and shifted chunks
            "prompt_n": prompt_n,
            "prompt_ms": prompt_ms,
            "prompt_per_token_ms": prompt_ms / prompt_n if prompt_n else 0.0,
            "prompt_per_second": 1000 * prompt_n / prompt_ms if prompt_ms else 0.0,
            "predicted_n": predicted_n,
            "predicted_ms": predicted_ms,
            "predicted_per_token_ms": predicted_ms / predicted_n if predicted_n else 0.0,
            "predicted_per_second": 1000 * predicted_n / predicted_ms if predicted_ms else 0.0,
            "draft_n": stats["drafted"],
            "draft_n_accepted": stats["accepted"],
        }

    def whole(self, result: dict, call) -> Any:
        if self.warm_up:
            self.blank(result)
        elif self.answer is not None:
            self.answer.reshape(result)
        result["timings"] = self.timings(call)
        if "usage" in result:  # OpenAI's count of the prompt tokens the cache held (the agents' wires read it)
            result["usage"]["prompt_tokens_details"] = {"cached_tokens": result["timings"]["cache_n"]}
        return pick_fields(result, self.options.response_fields if self.options else None)

    def blank(self, result: dict) -> None:
        """A warm-up's answer: nothing generated."""
        for choice in result.get("choices", []):
            if "text" in choice:
                choice["text"] = ""
            if "message" in choice:
                choice["message"]["content"] = ""
            if "delta" in choice and choice["delta"].get("content"):
                choice["delta"]["content"] = ""
            choice["logprobs"] = None
        if "usage" in result:
            result["usage"]["total_tokens"] -= result["usage"]["completion_tokens"]
            result["usage"]["completion_tokens"] = 0

    def events(self, chunk: dict) -> list[dict]:
        return [{"data": json.dumps(c)} for c in self.chunks(chunk)]

    def chunks(self, chunk: dict) -> list[dict]:
        """The chunks a stream's next chunk from llama_cpp goes out as (a chat's tool calls and
        reasoning parsed out of its text: several deltas, or none while a piece is held back)."""
        if self.warm_up:
            self.blank(chunk)
        self.last_chunk = chunk
        o = self.options
        choice = (chunk.get("choices") or [None])[0]
        if o is not None and choice is not None and not self.warm_up:
            part = choice["delta"] if "delta" in choice else choice
            key = "content" if "delta" in choice else "text"
            if self.watch.watching:  # its ends cut the text; what llama_cpp streams after them is not the answer's
                part[key] = self.visible(part.get(key) or "") or (None if key == "content" else "")
            if o.return_tokens:
                choice["tokens"] = self.next_tokens()
            if o.timings_per_token:
                chunk["timings"] = self.partial_timings()
        if self.answer is not None and not self.warm_up:
            return self.answer.chunks(chunk)
        return [chunk]

    def visible(self, text: str) -> str:
        """What of a stream's next `text` the client sees: nothing after ``n_indent``'s cut, nor
        past the token that ended the time budget (tokens drafted in its step after it)."""
        if self.cut_at is not None:
            return ""
        self.sent += text
        if self.watch.n_indent > 0:
            self.cut_at = indent_cut(self.sent, self.watch.n_indent)
        end = self.cut_at if self.cut_at is not None else len(self.sent)
        if self.watch.cut is not None:
            end = min(end, len(self.watch.text.decode("utf-8", errors="ignore")))
        content = self.sent[self.shown: end]
        self.shown = max(self.shown, end)
        return content

    def next_tokens(self) -> list[int]:
        """The completion's tokens a stream has not sent yet."""
        tokens = self.watch.completion_tokens()[self.stream_tokens:]
        self.stream_tokens += len(tokens)
        return tokens

    def partial_timings(self) -> dict:
        """llama-server's ``timings_per_token``: the generation's figures so far."""
        clock = self.watch.clock
        predicted_ms = (time.perf_counter() - clock.first) * 1000 if clock.first else 0.0
        n = len(self.watch.completion_tokens())
        return {"predicted_n": n, "predicted_ms": predicted_ms,
                "predicted_per_second": 1000 * n / predicted_ms if predicted_ms else 0.0}

    def failed(self, error) -> list[dict]:
        """The events that end a stream whose generation failed after its 200 went out."""
        return [error_event(error)]

    def opening(self) -> Optional[list[dict]]:
        """The events a stream opens with at once, before its prompt is evaluated, or None: the
        first step runs before the response starts, so that its failure is a real status (OpenAI's
        chat stream, as llama-server's). A wire that reports failures inside its stream opens at
        once, so that a client sees events while a long prompt is evaluated."""
        return None

    def waiting(self) -> list[dict]:
        """The events sent now and then while the prompt of a stream opened at once is evaluated."""
        return []

    def closing(self, call) -> list[dict]:
        """The events after the last chunk: OpenAI's usage chunk where asked
        (``stream_options.include_usage``), then ``[DONE]``."""
        events = []
        o = self.options
        if o is not None and o.stream_options is not None and o.stream_options.include_usage:
            completion = 0 if self.warm_up else len(self.watch.completion_tokens())
            last = self.last_chunk or {}
            usage = {
                "prompt_tokens": len(self.prompt), "completion_tokens": completion,
                "total_tokens": len(self.prompt) + completion, "speculative": call.stats.as_dict(),
            }
            chunk = {key: last[key] for key in ("id", "object", "created", "model") if key in last}
            events.append({"data": json.dumps({**chunk, "choices": [], "usage": usage})})
        self.watch.clock.stopped()
        events.append({"data": "[DONE]"})
        return events


def merge_completions(results: list[dict], one_prompt: bool = False) -> dict:
    """One completion of several (several prompts, or n_cmpl of `one_prompt`), as OpenAI answers:
    their choices in order, numbered, the completion tokens summed, and the prompt tokens too
    unless it was one prompt (counted once) (``speculative``: the last result's, which counts the
    whole request)."""
    choices = [choice for r in results for choice in r["choices"]]
    merged = dict(results[0], choices=[dict(choice, index=i) for i, choice in enumerate(choices)])
    prompts = results[:1] if one_prompt else results
    usage = {"prompt_tokens": sum(r["usage"]["prompt_tokens"] for r in prompts),
             "completion_tokens": sum(r["usage"]["completion_tokens"] for r in results)}
    usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    merged["usage"] = dict(results[-1]["usage"], **usage)
    return merged


def indent_cut(text: str, n_indent: int) -> Optional[int]:
    """Where llama-server's ``n_indent`` ends a completion: at the first character of the first
    line after a newline that is indented less than `n_indent` (its indentation stays); None: nowhere."""
    start = text.find("\n")
    while start != -1:
        at = start + 1
        while at < len(text) and text[at] in " \t":
            at += 1
        if at < len(text) and text[at] != "\n" and at - start - 1 < n_indent:
            return at
        start = text.find("\n", start + 1)
    return None


def stat_counts(stats) -> dict:
    """The counts of a call's :class:`plookup.api.stats.SpecStats` that ``timings`` reports."""
    return {"prefill_tokens": stats.prefill_tokens, "drafted": stats.drafted, "accepted": stats.accepted}


def pick_fields(body: Any, fields: Optional[List[str]]) -> Any:
    """llama-server's ``response_fields``: only the fields named, "a/b" taken from inside "a" and
    keyed "a/b"; a field the answer lacks is left out. None or []: the whole answer."""
    if not fields or not isinstance(body, dict):
        return body
    picked = {}
    for name in fields:
        value: Any = body
        for part in name.split("/"):
            if not isinstance(value, dict) or part not in value:
                break
            value = value[part]
        else:
            picked[name] = value
    return picked
