"""`plookup.Llama`: llama_cpp.Llama whose token generator decodes speculatively.

``generate`` hands its prompt to the model's :class:`~plookup.engine.Engine`, which puts it on a
slot (a sequence of the context) and steps: the drafter proposes a :class:`~plookup.draft.values.Draft`;
one ``llama_decode`` of [pending token + draft] (and the draft's branch on the slot's second
sequence) for every slot at once, with logits at every row; :func:`plookup.verify.accept.accept` walks each
slot's rows and says which tokens come out; rejected draft tokens leave that slot's sequence, so
after every step a slot's cache holds exactly its tokens: the prompt and every emitted token
except the newest, which is "pending" and decoded at the head of the next step. One slot
(``parallel=1``, the default) is a single stream; ``parallel=N`` serves N generations from N
threads in the same steps (:meth:`Llama.create_completions` runs a list of prompts that way).

Each ``create_completion`` / ``create_chat_completion`` / ``generate`` call owns a :class:`Call`
(its :class:`~plookup.api.stats.SpecStats` and its prediction's tokens). llama_cpp's completion code and
chat handlers call ``generate`` with fixed arguments, so the call reaches it through a context
variable set for the duration of the call (and of each step of its stream), never through
attributes of the model.
"""

from __future__ import annotations

import contextlib
import ctypes
import inspect
import os
import warnings
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Callable, Generator, Iterator, Optional, Sequence

import llama_cpp
import llama_cpp._internals as internals
import numpy as np

from ..draft.drafters import IndexDrafter, check_max_draft, make_drafter
from ..draft.values import Speculative
from ..engine import Engine
from ..engine.decode_thread import DecodeThread, teams_per_thread
from ..measure.costs import cached_cost_curve
from ..measure.exactness import (
    EXACT_MIN_ROWS,
    TILED_ENV,
    cached_invariance,
    cached_slot_invariance,
    model_params,
    recommended_backend_sampling,
    recommended_settings,
    slots_exact,
)
from ..verify.backend import BackendGreedy
from ..verify.chain import Chain
from ..verify.grammar import check_grammar
from ..verify.greedy import greedy_rows, logits_row
from ..verify.logprobs import Logprobs
from . import rpc
from .logprobs import check_logprobs, with_logprobs
from .prediction import chunk_text, completion_text, prediction_text, prediction_usage
from .stats import SpecStats

GGUF_MAGIC = b"GGUF"
COMPLETION = inspect.signature(llama_cpp.Llama.create_completion)


def check_gguf(model_path: str) -> None:
    """Fail early, naming the file, when it is missing or not a GGUF file at all."""
    try:
        with open(model_path, "rb") as f:
            magic = f.read(4)
    except FileNotFoundError:
        raise ValueError(f"model file not found: {model_path}") from None
    except IsADirectoryError:
        raise ValueError(f"model path is a directory, not a GGUF file: {model_path}") from None
    if magic != GGUF_MAGIC:
        raise ValueError(f"not a GGUF file (bad magic {magic!r}): {model_path}")


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

    def is_cancelled(self) -> bool:
        return self.cancelled is not None and self.cancelled()


_current_call: ContextVar[Optional[Call]] = ContextVar("plookup_call", default=None)


def _within(call: Call, function, *args, **kwargs):
    """`function(*args, **kwargs)` with `call` as the running call."""
    token = _current_call.set(call)
    try:
        return function(*args, **kwargs)
    finally:
        _current_call.reset(token)


class Stream:
    """A streamed completion: llama_cpp's chunks, each generated within its call.

    ``stats`` is the generation's :class:`SpecStats`, complete once the stream is exhausted or
    closed; ``completion_tokens_details()`` the prediction's accounting (None without one).
    """

    def __init__(self, llm: "Llama", call: Call, chunks: Iterator[dict], owner: bool):
        self._llm, self._call, self._chunks = llm, call, chunks
        self._text: Optional[list[str]] = [] if owner and call.prediction else None

    @property
    def stats(self) -> SpecStats:
        return self._call.stats

    def __iter__(self) -> "Stream":
        return self

    def __next__(self) -> dict:
        chunk = _within(self._call, next, self._chunks)
        if self._text is not None:
            self._text.append(chunk_text(chunk))
        return chunk

    def close(self) -> None:
        close = getattr(self._chunks, "close", None)
        if close is not None:
            _within(self._call, close)

    def completion_tokens_details(self) -> Optional[dict]:
        if self._text is None:
            return None
        return self._llm.prediction_details(self._call.prediction, "".join(self._text))


class Llama(llama_cpp.Llama):
    """A drop-in ``llama_cpp.Llama`` that drafts from its own context and verifies in one batch.

    ``drafter``: what :func:`plookup.make_drafter` builds (default: a suffix drafter).
    ``max_draft``: the most draft tokens verified per step (0 turns drafting off); sets the
    drafter's own when given (default: the drafter's, 64; the policy sizes each draft from the
    cost curve within it, and where verification is exact it stays within the batch sizes the
    probe found exact).
    ``cost_curve``: "auto" measures this model's verify-cost curve on this machine once (cached on
    disk, see :mod:`plookup.measure.costs`); an array gives it; None keeps the drafter's own.
    ``exactness``: "auto" loads the model with the settings under which ``plookup doctor`` found
    its verify batches bitwise equal to single-token decoding (when it has run for this model and
    build), and probes the settings in force once (cached): ``.exact`` says the verdict, and
    ``usage["speculative"]["exact"]`` repeats it. None skips both (``.exact`` is None).
    ``use_extra_bufts``: llama.cpp's weight repacking (llama_model_params; default on, unless the
    doctor's settings say off).
    ``parallel``: how many generations decode at once, each on a slot of its own, from as many
    threads (default 1). Every slot has the whole ``n_ctx`` window: the context holds
    ``parallel * n_ctx`` cells, a KV stream of n_ctx per slot (:attr:`kv_layout`; each row then
    attends over its own slot's cells only, and drafts carry no second branch). A call that shared
    a step with another slot is claimed exact only where the probe found a slot's rows beside
    another's bitwise its lone decode (``usage["speculative"]["exact"]``).
    ``decode_thread``: decode on a thread of the model's own, for callers on several threads (a
    server's pool); default: with several slots. Only where llama.cpp's CPU backend keeps a worker
    team per calling thread (OpenMP builds), see :mod:`plookup.engine.decode_thread`.
    ``backend_sampling``: sample greedy rows inside llama.cpp's graph and read token ids, not
    logits (:mod:`plookup.verify.backend`), for greedy calls without a repeat penalty, grammar or
    stopping criteria (``usage["speculative"]["sampler"]`` says "backend"); default: what
    ``plookup doctor`` found faster for this model on this machine, else off.
    ``rpc_servers``: ``["host:port", ...]`` or ``"host:port,..."``, hosts running ``plookup
    rpc-server`` (llama.cpp's RPC server): the model's layers go to them (all, unless
    ``n_gpu_layers`` says how many; ``tensor_split`` shares them out), as llama.cpp's ``--rpc``
    does (llama_cpp.Llama takes the argument and ignores it). A server that cannot be used at load
    is an :class:`~plookup.api.rpc.RpcError` naming it, within seconds; one lost later ends the
    process (see :mod:`plookup.api.rpc`).
    ``corpus``: also draft from a static corpus of the user's files (a path that ``plookup corpus
    build`` wrote, or a :class:`~plookup.index.corpus.CorpusIndex`), refused with a ValueError naming the
    file when it was built for another vocabulary or is corrupt; suffix drafter only.
    Everything else is ``llama_cpp.Llama``'s constructor; ``draft_model=`` is refused because it
    forces ``logits_all=True``, which this decoder does not need. A model whose memory cannot drop
    a suffix (recurrent, hybrid) decodes plainly, with a warning.

    The completions take an OpenAI-style ``prediction`` (see :mod:`plookup.api.prediction`) and report
    ``usage["speculative"]``; a streamed completion is a :class:`Stream`.
    """

    def __init__(
        self,
        model_path: str,
        *args,
        drafter: Optional[IndexDrafter] = None,
        max_draft: Optional[int] = None,
        cost_curve="auto",
        exactness="auto",
        use_extra_bufts: Optional[bool] = None,
        parallel: int = 1,
        decode_thread: Optional[bool] = None,
        corpus=None,
        backend_sampling: Optional[bool] = None,
        **kwargs,
    ):
        # llama_cpp.Llama.__del__ closes self._stack; it must exist even if validation fails.
        self._stack = contextlib.ExitStack()
        self._decode_thread: Optional[DecodeThread] = None
        if max_draft is not None:
            check_max_draft(max_draft)
        if isinstance(parallel, bool) or not isinstance(parallel, int) or parallel < 1:
            raise ValueError(f"parallel must be an integer >= 1, got {parallel!r}")
        if exactness not in ("auto", None):
            raise ValueError(f'exactness must be "auto" or None, got {exactness!r}')
        if kwargs.get("draft_model") is not None:
            raise ValueError(
                "plookup.Llama drafts by itself: pass drafter=plookup.SuffixDrafter() instead of "
                "draft_model= (which forces logits_all=True)"
            )
        if kwargs.get("swa_full") is False:
            # A trimmed sliding-window cache cannot roll back rejected draft tokens.
            warnings.warn("plookup.Llama needs swa_full=True to roll back drafts; using it")
            kwargs["swa_full"] = True
        check_gguf(model_path)
        settings = recommended_settings(model_path) if exactness == "auto" else None
        if settings is not None:  # plookup doctor measured verify batches exact with these
            kwargs.setdefault("flash_attn", settings.flash_attn)
            if not settings.tiled:
                os.environ.setdefault(TILED_ENV, "0")  # read by ggml at the process's first matmul
        repack = use_extra_bufts if use_extra_bufts is not None else settings is None or settings.repack
        servers = kwargs.pop("rpc_servers", None)  # llama_cpp.Llama takes it and ignores it
        self.rpc_devices: Optional[rpc.RpcDevices] = None
        if servers:
            kwargs = rpc.rpc_kwargs(kwargs)
            self.rpc_devices = rpc.connect(servers)  # an RpcError naming a server it cannot use
        try:
            with model_params(repack, self.rpc_devices.address if servers else None):
                super().__init__(model_path, *args, **kwargs)
        except BaseException:
            if self.rpc_devices is not None:
                self.rpc_devices.release()
            raise
        if self.rpc_devices is not None:
            rpc.attach(self, self.rpc_devices)
        # llama.cpp may round n_ctx up, but input_ids holds the requested n_ctx: create_completion
        # sizes max_tokens <= 0 by _n_ctx, and a generation it did not cap would lose its text.
        self._n_ctx = min(self._n_ctx, len(self.input_ids))
        self.parallel = parallel
        self.drafter = drafter if drafter is not None else make_drafter()
        if max_draft is not None:
            self.drafter.max_draft = max_draft
        self.exact: Optional[bool] = None
        if self.model_params.vocab_only:
            # Tokenizer-only loading, as llama_cpp.Llama's: no weights and no KV memory, so no
            # slots, no exactness probe and no cost curve (each would decode); generate() refuses.
            self.can_roll_back, self.backend_sampling, self._engine = False, False, None
            self.last_stats = SpecStats()
            return
        # Recurrent and hybrid memories cannot drop a suffix, so rejected draft tokens would stay.
        self.can_roll_back = not (self._is_recurrent or self._is_hybrid)
        if parallel > 1 and not self.can_roll_back:
            raise ValueError(f"parallel={parallel}: {model_path} keeps a recurrent state, which plookup "
                             f"decodes plainly, one generation at a time; use parallel=1")
        if parallel > self.n_batch:
            raise ValueError(f"parallel={parallel} needs n_batch >= {parallel} (one row per slot a step)")
        if (parallel > 1 if decode_thread is None else decode_thread) and teams_per_thread():
            self._decode_thread = DecodeThread()  # before the first decode: see its module
            self._stack.callback(self._decode_thread.close)
        # With several slots, a KV stream per slot (see plookup.draft.sizing), and so no
        # sequences for a second branch.
        streams = parallel > 1
        self._recreate_context(parallel, streams=streams)
        self._engine = Engine(self, parallel, branch_sequences=not streams, streams=streams)
        self._stack.callback(self._engine.chains.detach)  # (runs before the context is freed)
        if backend_sampling is None:
            backend_sampling = recommended_backend_sampling(model_path, settings)
        self.backend_sampling = bool(backend_sampling)
        if streams:
            self.drafter.branches = False
        if corpus is not None:  # the drafter takes it only once it is known to be this model's
            from ..index.corpus import open_corpus
            from ..index.memory import vocabulary_id

            self.drafter.use_corpus(open_corpus(corpus, vocabulary_id(self)))
        if not self.can_roll_back:
            warnings.warn(f"plookup: {model_path} keeps a recurrent state that cannot drop rejected "
                          f"draft tokens; decoding it plainly, without speculation")
        else:
            self.drafter.warm_up()  # load the numba kernels now, not inside the first generation
            if exactness == "auto":
                self.exact = self._keep_exact(streams)
            if isinstance(cost_curve, str) and cost_curve == "auto":
                # With several slots a step verifies up to parallel * (max_draft + 1) rows.
                cost_curve = cached_cost_curve(self, parallel * (self.drafter.max_draft + 1) if parallel > 1 else None)
            if cost_curve is not None:
                self.drafter.use_cost_curve(cost_curve)
        self.last_stats = SpecStats(exact=self.exact)  # a view of the latest call's stats

    def _keep_exact(self, streams: bool) -> bool:
        """Whether verification is exact here (the probe, cached), keeping drafts within the batch
        sizes found exact; where it is, two-branch drafts are off, and with several slots a slot's
        steps shared with others stay exact where the probe found them so."""
        max_rows = self.drafter.max_draft + 1
        rows = cached_invariance(self, max(EXACT_MIN_ROWS, max_rows)).exact_within(max_rows)
        if rows is None:
            return False
        self.drafter.max_draft = rows - 1
        # Exact single drafts beat a second branch: without flash attention its rows round
        # differently (softmax over cells out of order), and a branch taken leaves its tokens in
        # other cells than plain decoding would, so every later token would round differently too.
        self.drafter.branches = False
        if streams and slots_exact(cached_slot_invariance(self, rows), "streams"):
            # Measured (plookup doctor, "beside a 2nd slot"): a slot's rows beside another's are
            # bitwise its lone decode with a KV stream per sequence, not in one unified cache,
            # where its cells interleave with the others'.
            self._engine.shared_exact = True
        return True

    @property
    def max_draft(self) -> int:
        return self.drafter.max_draft

    @property
    def _seed(self) -> int:
        call = _current_call.get()
        return call.seed if call is not None and call.seed is not None else self._model_seed

    @_seed.setter
    def _seed(self, seed: int) -> None:
        # llama_cpp's completion sets the seed, then builds the call's sampler from it: the
        # running call keeps its own, so that calls on other threads cannot change it meanwhile.
        self._model_seed = seed
        call = _current_call.get()
        if call is not None:
            call.seed = seed

    @property
    def _input_ids(self) -> np.ndarray:
        """llama_cpp's completion code checks its stopping criteria on ``_input_ids`` once a
        generation ends: the running call's slot's tokens, not slot 0's."""
        call = _current_call.get()
        gen = call.generation if call is not None else None
        if gen is not None and gen.history is not None:  # it ended: its slot may be another's now
            return gen.history
        if gen is not None and gen.slot is not None and gen.slot.index != 0:
            return gen.slot.tokens[: gen.slot.n]
        return self.input_ids[: self.n_tokens]

    @property
    def _scores(self) -> np.ndarray:
        # ... and on _scores[-1]: plookup keeps no scores (it samples from the context's rows),
        # so that row is whatever llama_cpp left there; never an empty view to index.
        return self.scores[: max(1, self.n_tokens), :]

    @property
    def kv_layout(self) -> str:
        """"unified" (one cache the slots share, a second branch sequence per slot) or "streams"
        (a stream per slot: chosen with several slots where that keeps them exact)."""
        return "unified" if self.context_params.kv_unified else "streams"

    def _recreate_context(self, parallel: int, streams: bool = False) -> None:
        """Each slot decodes on a sequence of its own, and verifies a second branch on another,
        sharing cells with the first (kv_unified: a split cache would also split each sequence's
        window). llama_cpp.Llama offers no such parameters, so its context is replaced by one that
        has 2 * parallel sequences and, with several slots, parallel * n_ctx cells. With
        `streams`, each of `parallel` sequences has a stream of n_ctx cells and no second branch.
        Its decodes stay on one thread (:mod:`plookup.engine.decode_thread`)."""
        params = self.context_params
        # (unless llama_cpp made one already, e.g. in its embedding mode)
        if not (parallel == 1 and params.n_seq_max >= 2 and params.kv_unified and params.n_outputs_max_per_seq == 0):
            params.n_outputs_max_per_seq = 0  # n_batch: a backend chain samples every row of a verify step
            params.n_seq_max = parallel if streams else 2 * parallel
            params.kv_unified = not streams
            params.n_ctx = parallel * self._n_ctx if parallel > 1 else params.n_ctx
            self._ctx.close()  # free the first cache before allocating the second
            self._ctx = self._stack.enter_context(
                contextlib.closing(
                    internals.LlamaContext(model=self._model, params=params, verbose=self.verbose)
                )
            )
        if self._decode_thread is not None:
            self._ctx.decode = self._decode_thread.route(self._ctx.decode)
        if self._lora_adapter is not None:
            adapters = (llama_cpp.llama_adapter_lora_p_ctypes * 1)(self._lora_adapter)
            scales = (ctypes.c_float * 1)(self.lora_scale)
            if llama_cpp.llama_set_adapters_lora(self._ctx.ctx, adapters, 1, scales):
                raise RuntimeError(f"Failed to set LoRA adapter from lora path: {self.lora_path}")

    # -- the public entry points keep llama_cpp's signatures; completions gain usage["speculative"]
    # and an optional OpenAI-style `prediction`

    def create_completion(self, *args, prediction=None, speculative=None, **kwargs):
        call, owner = self._call(prediction, speculative)
        request = COMPLETION.bind(self, *args, **kwargs).arguments
        del request["self"]
        # max_tokens <= 0 or None is "up to the context", which the room left bounds anyway.
        max_tokens = request.get("max_tokens", COMPLETION.parameters["max_tokens"].default)
        call.max_tokens = max_tokens if isinstance(max_tokens, int) and max_tokens > 0 else None
        # llama_cpp reads logprobs from logits_all rows, which plookup does not keep: its completion
        # runs without them, and the generation reads them from the rows that chose its tokens.
        top = request.pop("logprobs", None)
        check_logprobs(top, request.get("echo", False))
        call.logprobs = logprobs = Logprobs(top) if top is not None else None
        result = _within(call, super().create_completion, **request)
        if logprobs is not None:
            result = with_logprobs(self, request["prompt"], logprobs, result)
        return self._deliver(call, owner, result)

    def create_chat_completion(self, *args, prediction=None, speculative=None, **kwargs):
        # The chat handler generates through self.create_completion, which joins this call.
        call, owner = self._call(prediction, speculative)
        return self._deliver(call, owner, _within(call, super().create_chat_completion, *args, **kwargs))

    @contextlib.contextmanager
    def request(self, prediction=None, cancelled: Optional[Callable[[], bool]] = None,
                speculative=None) -> Iterator[Call]:
        """The create_* calls inside the block (and their streams) run as this one request: with
        this prediction and `speculative` (:class:`plookup.draft.values.Speculative` or a dict of
        its fields), ending early once ``cancelled()`` is true, counted in the Call's stats.
        Its prediction's accounting is left to the caller (:meth:`prediction_details`): a server
        does it outside its model lock."""
        call = self._new_call(prediction, cancelled, speculative)
        token = _current_call.set(call)
        try:
            yield call
        finally:
            _current_call.reset(token)

    def _call(self, prediction, speculative=None) -> tuple[Call, bool]:
        """(the call, whether this entry point owns it): the running one (a chat handler's
        completion inside create_chat_completion, or any call inside :meth:`request`), or a new one."""
        running = _current_call.get()
        if prediction is None and speculative is None and running is not None:
            return running, False
        return self._new_call(prediction, speculative=speculative), True

    def _new_call(self, prediction, cancelled=None, speculative=None) -> Call:
        control = Speculative.of(speculative)  # a bad field is the caller's ValueError, before any work
        stats = SpecStats(exact=self.exact)  # before anything can fail: a failed call owns empty stats
        tokens = () if prediction is None else self.tokenize(prediction_text(prediction).encode("utf-8"), add_bos=False)
        return Call(stats, tokens, cancelled, speculative=control)

    def _deliver(self, call: Call, owner: bool, result):
        if not isinstance(result, dict):
            return Stream(self, call, result, owner)
        result["usage"]["speculative"] = call.stats.as_dict()
        if owner and call.prediction:
            result["usage"]["completion_tokens_details"] = self.prediction_details(call.prediction, completion_text(result))
        return result

    def prediction_details(self, prediction: Sequence[int], text: str) -> dict:
        """OpenAI's ``completion_tokens_details`` for a completion `text` and a prediction's tokens."""
        return prediction_usage(prediction, self.tokenize(text.encode("utf-8"), add_bos=False))

    def generate(
        self,
        tokens: Sequence[int],
        top_k: int = 40,
        top_p: float = 0.95,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        temp: float = 0.80,
        repeat_penalty: float = 1.0,
        reset: bool = True,
        frequency_penalty: float = 0.0,
        presence_penalty: float = 0.0,
        tfs_z: float = 1.0,
        mirostat_mode: int = 0,
        mirostat_tau: float = 5.0,
        mirostat_eta: float = 0.1,
        penalize_nl: bool = True,
        logits_processor: Optional[llama_cpp.LogitsProcessorList] = None,
        stopping_criteria: Optional[llama_cpp.StoppingCriteriaList] = None,
        grammar: Optional[llama_cpp.LlamaGrammar] = None,
    ) -> Generator[int, Optional[Sequence[int]], None]:
        self._check_weights()
        call = _current_call.get() or Call(SpecStats(exact=self.exact))
        self.last_stats = stats = call.stats
        sampling = dict(
            top_k=top_k, top_p=top_p, min_p=min_p, typical_p=typical_p, temp=temp,
            repeat_penalty=repeat_penalty, frequency_penalty=frequency_penalty,
            presence_penalty=presence_penalty, tfs_z=tfs_z, mirostat_mode=mirostat_mode,
            mirostat_tau=mirostat_tau, mirostat_eta=mirostat_eta, penalize_nl=penalize_nl,
        )
        tokens = list(tokens) if reset else [*self._input_ids.tolist(), *tokens]
        if not tokens:
            raise ValueError("empty prompt: generation needs at least one token")
        if len(tokens) > self._n_ctx:
            raise ValueError(
                f"prompt of {len(tokens)} tokens exceeds the context window of {self._n_ctx}"
            )
        for i, token in enumerate(tokens):
            if not 0 <= token < self._n_vocab:  # llama_decode would only say "returned -1"
                raise ValueError(
                    f"token id {token} at position {i} is outside the vocabulary of {self._n_vocab}"
                )
        check_grammar(self._model.vocab, grammar)  # llama_cpp would add a NULL sampler and crash
        if logits_processor is not None or not self.can_roll_back:
            # A Python logits processor reads self._input_ids at every call, which during a
            # verify step would include unverified draft tokens: decode plainly instead, with
            # llama_cpp's own loop on sequence 0, the whole context to itself.
            if logits_processor is not None:
                warnings.warn("plookup: logits_processor given, decoding without speculation")
            stats.sampler = "plain"
            with self._engine.exclusive():
                for token in super().generate(
                    tokens, logits_processor=logits_processor, stopping_criteria=stopping_criteria,
                    grammar=grammar, **sampling,
                ):
                    if call.is_cancelled():
                        return
                    if call.logprobs is not None:  # the row it was sampled from is the newest
                        call.logprobs.read(self._logits_row(-1), token)
                    stats.record_step(0, 0)
                    stats.generated += 1
                    if call.on_token is not None:
                        call.on_token(token)
                    yield token
            return
        # A greedy chain without a grammar reads each row's argmax in place (plookup.verify.greedy), or
        # has it read on the backend where nothing else reads the row (plookup.verify.backend):
        # stopping criteria and logprobs read it.
        sampler = greedy_rows(self._n_vocab, self.last_n_tokens_size, grammar=grammar, **sampling)
        if call.chain is not None:
            sampler = None  # built as the request lists it (its logit bias, say), never read as an argmax
        reads_rows = stopping_criteria is not None or call.logprobs is not None
        if sampler is not None and self.backend_sampling and sampler.window is None and not reads_rows:
            sampler = BackendGreedy()
        stats.sampler = sampler.name if sampler is not None else "chain"
        sampler = sampler or self._init_sampler(grammar=grammar, **sampling)
        if len(tokens) >= self._n_ctx:
            return  # prompt + output <= n_ctx, as llama_cpp caps it: no room for a token
        randomly = sampling["temp"] != 0  # llama_cpp: < 0 samples too
        call.generation = self._engine.admit(tokens, call, sampler, randomly, stopping_criteria)
        if call.on_token is None:
            yield from self._engine.tokens(call.generation)
            return
        tokens = self._engine.tokens(call.generation)
        try:
            for token in tokens:
                call.on_token(token)
                yield token
        finally:
            tokens.close()  # now, as `yield from` would: closing the generation frees its slot

    def _init_sampler(self, **sampling):
        # llama_cpp builds the chain of every generation that samples on the host, its own plain
        # loop's included: the running call's llama-server chain where it has one.
        call = _current_call.get()
        if call is not None and call.chain is not None:
            return call.chain.build(self, self._seed, **sampling)
        return super()._init_sampler(**sampling)

    # -- many prompts at once

    def create_completions(self, prompts: Sequence, **kwargs) -> list:
        """``create_completion(prompt, **kwargs)`` for every prompt, ``parallel`` at a time in
        the same steps; one result per prompt, in order. The first error is raised once the
        others are done."""
        return self._each(self.create_completion, [dict(kwargs, prompt=p) for p in prompts])

    def create_chat_completions(self, conversations: Sequence, **kwargs) -> list:
        """``create_chat_completion(messages=m, **kwargs)`` for every list of messages, as
        :meth:`create_completions` does."""
        return self._each(self.create_chat_completion, [dict(kwargs, messages=m) for m in conversations])

    def _each(self, create, arguments: list[dict]) -> list:
        if any(a.get("stream") for a in arguments):
            raise ValueError("create_completions returns whole results: stream=True is not taken")
        with ThreadPoolExecutor(max_workers=self.parallel, thread_name_prefix="plookup-slot") as pool:
            futures = [pool.submit(create, **a) for a in arguments]
        return [future.result() for future in futures]

    def prefill(self, tokens: Sequence[int], **sampling) -> None:
        """Cache `tokens` in a slot through the engine, as a generation with `sampling` (the
        arguments of :meth:`generate`) would: one token generated and dropped. A generation of
        the same tokens then decodes only the last one anew, as it would after llama_cpp's
        ``eval(tokens[:-1])``, but its backend chains, if it samples there, are already attached:
        ``eval`` would detach them, and the generation would reserve llama.cpp's graphs again."""
        primer = self.generate(tokens, **sampling)
        try:
            next(primer, None)
        finally:
            primer.close()

    def eval(self, tokens: Sequence[int]) -> None:
        self._check_weights()
        # llama_cpp's eval reads sequence 0's logits, which a backend chain there would keep on
        # the backend.
        self._engine.chains.detach()
        super().eval(tokens)

    def _check_weights(self) -> None:
        if self._engine is None:
            raise ValueError(f"{self.model_path} was loaded with vocab_only=True: it tokenizes and detokenizes, "
                             f"generating needs the weights (load it without vocab_only)")  # fmt: skip

    def _logits_row(self, i: int) -> np.ndarray:
        return logits_row(self._ctx, i, self._n_vocab)
