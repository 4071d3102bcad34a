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

This module is the adapter; each call's state is :mod:`.call`'s, the load's steps are
:mod:`.load`'s, :mod:`.context`'s and :mod:`.measured`'s, how tokens are chosen :mod:`.sampling`'s,
what llama_cpp's own code reads while a call runs :mod:`.views`', and what the app reads of the model
and its engine :mod:`.readings`'.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import os
from typing import Callable, Generator, Iterator, Optional, Sequence

import llama_cpp

from ..draft.drafters import make_drafter
from ..draft.index_drafter import IndexDrafter
from ..measure.settings import recommended_backend_sampling
from ..verify.grammar import check_grammar
from ..verify.logprobs import Logprobs
from .call import (Call, Stream, check_prompt, current_call, deliver, each, handed_over, joined_or_new, new_call,
                   running, within)
from .context import start_engine
from ..log import log, phase
from .load import check_arguments, doctor_settings, layers_placed, load_model, set_up_drafter
from .logprobs import check_logprobs, with_chat_bytes, with_logprobs
from .measured import calibrate, check_calibration
from .prediction import prediction_usage
from .sampling import engine_sampler, plain_tokens, seeded_where_drafts_show
from .stats import SpecStats
from .readings import Readings
from .views import RunningCallView

__all__ = ["Call", "Llama", "Stream"]

COMPLETION = inspect.signature(llama_cpp.Llama.create_completion)


class Llama(Readings, RunningCallView):
    """A drop-in ``llama_cpp.Llama`` that drafts from its own context and verifies in one batch.

    plookup's arguments (the README's "Usage" tells each in full):

    - ``drafter``: what :func:`plookup.make_drafter` builds (default: a suffix drafter);
      ``max_draft``: the most draft tokens a step verifies, 0 for none (default: the drafter's;
      0 on one slot measures neither figure below, and ``.exact`` stays None).
    - ``cost_curve``: "auto" measures this model's verify-cost curve here once (cached, see
      :mod:`plookup.measure.costs`); an array gives it; None keeps the drafter's own.
    - ``exactness``: "auto" loads the model with the settings ``plookup doctor`` found exact for it
      and probes the settings in force once (cached): ``.exact`` and
      ``usage["speculative"]["exact"]`` say the verdict. None skips both (``.exact`` is None).
    - ``calibration``: "blocking" (default) measures the figures ``cost_curve`` and ``exactness``
      need at load; "background" drafts nothing until they are cached (:attr:`calibration_pending`,
      :func:`plookup.api.measured.take_over`; ``plookup serve`` measures in :mod:`.background`).
    - ``use_extra_bufts``: llama.cpp's weight repacking (default on, unless the doctor's settings
      say off).
    - ``parallel``: how many generations decode at once, each on a slot with the whole ``n_ctx``
      window, from as many threads (default 1; :attr:`kv_layout`).
    - ``decode_thread``: decode on a thread of the model's own (default: with several slots, where
      llama.cpp keeps a worker team per calling thread; :mod:`plookup.engine.decode_thread`).
    - ``backend_sampling``: read greedy rows' tokens on llama.cpp's graph, not their logits
      (:mod:`plookup.verify.backend`); default: what ``plookup doctor`` found faster here, else off.
    - ``rpc_servers``: ``["host:port", ...]`` or ``"host:port,..."`` running ``plookup
      rpc-server``, which get the model's layers as llama.cpp's ``--rpc`` gives them
      (:mod:`plookup.api.rpc`; a server it cannot use is an :class:`~plookup.api.rpc_check.RpcError`).
    - ``cache_reuse``: after the common prefix, reuse cached chunks of at least this many tokens
      found further on in a new prompt by shifting their cells into place, as llama-server's
      ``--cache-reuse`` (default 0: the common prefix only; :mod:`plookup.engine.reuse`).
    - ``flash_attn``: llama_cpp's bool, or "auto": the doctor's choice for the model, else
      llama.cpp's own (on where the backend has the kernel), as llama-server's ``-fa auto``.
    - ``corpus``: also draft from a static corpus (a path ``plookup corpus build`` wrote, or a
      :class:`~plookup.index.corpus.CorpusIndex`); suffix drafter only.

    Everything else is ``llama_cpp.Llama``'s; ``draft_model=`` is refused (it forces
    ``logits_all=True``). A model whose memory cannot drop a suffix (recurrent, hybrid) decodes
    plainly, with a warning. The completions take an OpenAI-style ``prediction``
    (:mod:`plookup.api.prediction`) and report ``usage["speculative"]``; a streamed completion is
    a :class:`Stream`.
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
        cache_reuse: int = 0,
        calibration: str = "blocking",
        **kwargs,
    ):
        # llama_cpp.Llama.__del__ closes self._stack; it must exist even if validation fails.
        self._stack = contextlib.ExitStack()
        self._decode_thread = None  # a plookup.engine.decode_thread.DecodeThread, where one helps
        self.calibration_pending = None  # a plookup.api.measured.Pending while figures are missing
        check_calibration(calibration)
        load = dict(model_path=model_path, args=list(args), kwargs=dict(kwargs), parallel=parallel,
                    use_extra_bufts=use_extra_bufts)  # what a process measuring its figures loads
        check_arguments(model_path, max_draft, parallel, exactness, kwargs)
        settings, repack = doctor_settings(model_path, exactness, use_extra_bufts, kwargs)
        servers = kwargs.get("rpc_servers")
        with phase(f"loading {os.path.basename(model_path)}"):
            load_model(self, model_path, args, kwargs, repack)  # over RPC where kwargs has rpc_servers
        log.info(layers_placed(llama_cpp.llama_model_n_layer(self._model.model) + 1, kwargs["n_gpu_layers"], servers))
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
        streams = start_engine(self, parallel, decode_thread)  # sets can_roll_back and _engine
        self.cache_reuse = cache_reuse
        if backend_sampling is None:
            backend_sampling = recommended_backend_sampling(model_path, settings)
        self.backend_sampling = bool(backend_sampling)
        set_up_drafter(self, corpus, streams)
        calibrate(self, exactness, cost_curve, streams, calibration, load)  # sets exact, calibration_pending
        self.last_stats = SpecStats(exact=self.exact)  # a view of the latest call's stats

    @property
    def max_draft(self) -> int:
        return self.drafter.max_draft

    def model_meta(self) -> dict:
        """What llama-server's /v1/models says of the model (its ``meta``): vocabulary, context
        trained on and per slot, embedding width, parameters and size in bytes."""
        model = self._model
        return {
            "vocab_type": int(llama_cpp.llama_vocab_type(model.vocab)), "n_vocab": self.n_vocab(),
            "n_ctx": self.n_ctx(), "n_ctx_train": model.n_ctx_train(), "n_embd": self.n_embd(),
            "n_params": model.n_params(), "size": model.size(),
        }

    @property
    def cache_reuse(self) -> int:
        """The shortest cached chunk a new prompt reuses by shifting its cells into place, for a
        request that does not say (llama-server's ``--cache-reuse``; 0: the common prefix only)."""
        return self._engine.cache_reuse if self._engine is not None else 0

    @cache_reuse.setter
    def cache_reuse(self, tokens: int) -> None:
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
            raise ValueError(f"cache_reuse must be an integer >= 0 (tokens), got {tokens!r}")
        if tokens and not self._engine.context.can_shift:
            raise ValueError(f"cache_reuse={tokens}: {self.model_path}'s memory cannot shift its cells; use 0")
        self._engine.cache_reuse = tokens

    @property
    def kv_layout(self) -> str:
        """"unified" (one cache the slots share, a second branch sequence per slot) or "streams"
        (a stream per slot: chosen with several slots where that keeps them exact)."""
        return "unified" if self.context_params.kv_unified else "streams"

    # -- the public entry points keep llama_cpp's signatures; completions gain usage["speculative"]
    # and an optional OpenAI-style `prediction`

    def create_completion(self, *args, prediction=None, speculative=None, **kwargs):
        call, owner = joined_or_new(self, prediction, speculative)
        request = COMPLETION.bind(self, *args, **kwargs).arguments
        del request["self"]
        # max_tokens <= 0 or None is "up to the context", which the room left bounds anyway.
        max_tokens = request.get("max_tokens", COMPLETION.parameters["max_tokens"].default)
        call.max_tokens = max_tokens if isinstance(max_tokens, int) and max_tokens > 0 else None
        temperature = request.get("temperature", COMPLETION.parameters["temperature"].default)
        if seeded_where_drafts_show(request.get("seed"), temperature, self.exact):
            call.speculative = dataclasses.replace(call.speculative, n_max=0)
            call.last_token_alone = True
        # llama_cpp reads logprobs from logits_all rows, which plookup does not keep: its completion
        # runs without them, and the generation reads them from the rows that chose its tokens.
        top = request.pop("logprobs", None)
        check_logprobs(top, request.get("echo", False))
        call.logprobs = logprobs = Logprobs(top) if top is not None else None
        result = within(call, super().create_completion, **request)
        if logprobs is not None:
            result = with_logprobs(self, request["prompt"], logprobs, result)
        return deliver(self, call, owner, result)

    def create_chat_completion(self, *args, prediction=None, speculative=None, **kwargs):
        # The chat handler generates through self.create_completion, which joins this call.
        call, owner = joined_or_new(self, prediction, speculative)
        result = within(call, super().create_chat_completion, *args, **kwargs)
        return deliver(self, call, owner, with_chat_bytes(result) if kwargs.get("logprobs") else result)

    @contextlib.contextmanager
    def request(self, prediction=None, cancelled: Optional[Callable[[], bool]] = None,
                speculative=None) -> Iterator[Call]:
        """The create_* calls inside the block (and their streams) run as this one request: with
        this prediction and `speculative` (:class:`plookup.draft.values.Speculative` or a dict of
        its fields), ending early once ``cancelled()`` is true, counted in the Call's stats.
        Its prediction's accounting is left to the caller (:meth:`prediction_details`): a server
        does it outside its model lock."""
        with running(new_call(self, prediction, cancelled, speculative)) as call:
            yield call

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
        call = current_call.get() or Call(SpecStats(exact=self.exact))
        self.last_stats = call.stats
        sampling = dict(
            top_k=top_k, top_p=top_p, min_p=min_p, typical_p=typical_p, temp=temp,
            repeat_penalty=repeat_penalty, frequency_penalty=frequency_penalty,
            presence_penalty=presence_penalty, tfs_z=tfs_z, mirostat_mode=mirostat_mode,
            mirostat_tau=mirostat_tau, mirostat_eta=mirostat_eta, penalize_nl=penalize_nl,
        )
        tokens = list(tokens) if reset else [*self._input_ids.tolist(), *tokens]
        check_prompt(tokens, self._n_ctx, self._n_vocab)
        check_grammar(self._model.vocab, grammar)  # llama_cpp would add a NULL sampler and crash
        if logits_processor is not None or not self.can_roll_back:  # llama_cpp's own loop, plainly
            yield from plain_tokens(self, call, super().generate, tokens, logits_processor, stopping_criteria,
                                    grammar, sampling)
            return
        sampler = engine_sampler(self, call, grammar, stopping_criteria, sampling)
        if len(tokens) >= self._n_ctx:
            return  # prompt + output <= n_ctx, as llama_cpp caps it: no room for a token
        randomly = sampling["temp"] != 0  # llama_cpp: < 0 samples too
        call.generation = self._engine.wait_for_slot(tokens, call, sampler, randomly, stopping_criteria)
        yield from handed_over(call, self._engine.tokens(call.generation))

    # -- many prompts at once

    def create_completions(self, prompts: Sequence, **kwargs) -> list:
        """``create_completion(prompt, **kwargs)`` for every prompt, ``parallel`` at a time in
        the same steps; one result per prompt, in order. The first error is raised once the
        others are done."""
        return each(self.create_completion, [dict(kwargs, prompt=p) for p in prompts], self.parallel)

    def create_chat_completions(self, conversations: Sequence, **kwargs) -> list:
        """``create_chat_completion(messages=m, **kwargs)`` for every list of messages, as
        :meth:`create_completions` does."""
        return each(self.create_chat_completion, [dict(kwargs, messages=m) for m in conversations], self.parallel)

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
