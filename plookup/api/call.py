"""A call: one generation request's state, and how it reaches llama_cpp's completion code.

Each ``create_completion`` / ``create_chat_completion`` / ``generate`` call owns a :class:`Call`
(its :class:`~plookup.api.stats.SpecStats` and its prediction's tokens). llama_cpp's completion code and
chat handlers call ``generate`` with fixed arguments, so the call reaches it through a context
variable set for the duration of the call (and of each step of its stream), never through
attributes of the model.
"""

from __future__ import annotations

import contextlib
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional, Sequence

from ..draft.values import Speculative
from ..verify.chain import Chain
from ..verify.logprobs import Logprobs
from .prediction import chunk_text, completion_text, prediction_text
from .stats import SpecStats


@dataclass
class Call:
    """One generation request: its counters, the tokens of its prediction (a draft source), and a
    predicate that, once true, ends its generation at the next step (e.g. its client hung up)."""

    stats: SpecStats = field(default_factory=SpecStats)
    prediction: Sequence[int] = ()
    cancelled: Optional[Callable[[], bool]] = None
    # The most tokens the caller will take (create_completion's max_tokens): drafts never reach
    # past it, since a verified token nobody takes is a wasted row of the batch.
    max_tokens: Optional[int] = None
    # The sampler's seed, set by llama_cpp's completion code for this call (the model's own seed
    # is shared by every call running at once).
    seed: Optional[int] = None
    # Its generation on the engine (plookup.engine.Generation), once admitted: its slot's tokens
    # are what llama_cpp's completion code reads as the model's input_ids.
    generation: Optional[object] = None
    # Set by a completion that asks for logprobs (None: no row is read for them): each emitted
    # token's values, read from the row that chose it.
    logprobs: Optional[Logprobs] = None
    # llama-server's sampler chain (a request's `samplers` order and its other samplers), built in
    # place of llama_cpp's; None: llama_cpp's chain, or plookup's argmax where that is the same.
    chain: Optional[Chain] = None
    # Called with every token handed to llama_cpp's completion code, as it is handed over (a
    # server's token ids, timings and time budget).
    on_token: Optional[Callable[[int], None]] = None
    # Its control of the drafts (llama-server's `speculative` field): bounds on this request only.
    speculative: Speculative = Speculative()
    # Decode the prompt's last token in a pass of its own, as a repeated request whose prompt is
    # cached does: the first token's row is then the same fresh or cached (plookup.api.sampling,
    # a seeded request where verify batches are not exact).
    last_token_alone: bool = False
    # The shortest cached chunk its prompt reuses by shifting its cells (llama-server's
    # n_cache_reuse; plookup.engine.reuse); None: the model's default (Llama.cache_reuse).
    cache_reuse: Optional[int] = None
    # The cross-request memory it drafts from and is remembered in (a server's tenant's own:
    # plookup.index.scopes); None: the model's drafter's.
    memory: Optional[object] = None

    def is_cancelled(self) -> bool:
        return self.cancelled is not None and self.cancelled()


current_call: ContextVar[Optional[Call]] = ContextVar("plookup_call", default=None)


def within(call: Call, function, *args, **kwargs):
    """`function(*args, **kwargs)` with `call` as the running call."""
    token = current_call.set(call)
    try:
        return function(*args, **kwargs)
    finally:
        current_call.reset(token)


@contextlib.contextmanager
def running(call: Call) -> Iterator[Call]:
    """`call` the running call for the duration of the block."""
    token = current_call.set(call)
    try:
        yield call
    finally:
        current_call.reset(token)


def new_call(llm, prediction, cancelled=None, speculative=None) -> Call:
    control = Speculative.of(speculative)  # a bad field is the caller's ValueError, before any work
    stats = SpecStats(exact=llm.exact)  # before anything can fail: a failed call owns empty stats
    tokens = () if prediction is None else llm.tokenize(prediction_text(prediction).encode("utf-8"), add_bos=False)
    return Call(stats, tokens, cancelled, speculative=control)


def joined_or_new(llm, prediction, speculative=None) -> tuple[Call, bool]:
    """(the call, whether this entry point owns it): the running one (a chat handler's
    completion inside create_chat_completion, or any call inside ``Llama.request``), or a new one."""
    running_call = current_call.get()
    if prediction is None and speculative is None and running_call is not None:
        return running_call, False
    return new_call(llm, prediction, speculative=speculative), True


def deliver(llm, call: Call, owner: bool, result):
    """The entry point's result: a :class:`Stream`, or the completion with its call's
    ``usage["speculative"]`` (and, where it owns a prediction, its accounting)."""
    if not isinstance(result, dict):
        return Stream(llm, call, result, owner)
    result["usage"]["speculative"] = call.stats.as_dict()
    if owner and call.prediction:
        result["usage"]["completion_tokens_details"] = llm.prediction_details(call.prediction, completion_text(result))
    return result


class Stream:
    """A streamed completion: llama_cpp's chunks, each generated within its call.

    ``stats`` is the generation's :class:`SpecStats`, complete once the stream is exhausted or
    closed; ``completion_tokens_details()`` the prediction's accounting (None without one).
    """

    def __init__(self, llm, call: Call, chunks: Iterator[dict], owner: bool):
        self._llm, self._call, self._chunks = llm, call, chunks
        self._text: Optional[list[str]] = [] if owner and call.prediction else None

    @property
    def stats(self) -> SpecStats:
        return self._call.stats

    def __iter__(self) -> "Stream":
        return self

    def __next__(self) -> dict:
        chunk = within(self._call, next, self._chunks)
        if self._text is not None:
            self._text.append(chunk_text(chunk))
        return chunk

    def close(self) -> None:
        close = getattr(self._chunks, "close", None)
        if close is not None:
            within(self._call, close)

    def completion_tokens_details(self) -> Optional[dict]:
        if self._text is None:
            return None
        return self._llm.prediction_details(self._call.prediction, "".join(self._text))


def each(create, arguments: list[dict], parallel: int) -> list:
    """``create(**a)`` for every `a` of `arguments`, from `parallel` threads: one result each, in
    order; the first error is raised once the others are done."""
    if any(a.get("stream") for a in arguments):
        raise ValueError("create_completions returns whole results: stream=True is not taken")
    with ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="plookup-slot") as pool:
        futures = [pool.submit(create, **a) for a in arguments]
    return [future.result() for future in futures]


def handed_over(call: Call, tokens: Iterator[int]) -> Iterator[int]:
    """`tokens` as handed to llama_cpp's completion code, each to ``call.on_token`` first."""
    if call.on_token is None:
        yield from tokens
        return
    try:
        for token in tokens:
            call.on_token(token)
            yield token
    finally:
        tokens.close()  # now, as `yield from` would: closing the generation frees its slot


def check_prompt(tokens: Sequence[int], n_ctx: int, n_vocab: int) -> None:
    if not tokens:
        raise ValueError("empty prompt: generation needs at least one token")
    if len(tokens) > n_ctx:
        raise ValueError(f"prompt of {len(tokens)} tokens exceeds the context window of {n_ctx}")
    for i, token in enumerate(tokens):
        if not 0 <= token < n_vocab:  # llama_decode would only say "returned -1"
            raise ValueError(f"token id {token} at position {i} is outside the vocabulary of {n_vocab}")
