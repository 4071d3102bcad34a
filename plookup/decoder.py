"""`plookup.Llama`: llama_cpp.Llama whose token generator decodes speculatively.

One step: the drafter proposes a :class:`~plookup.draft.Draft`; one ``llama_decode`` of
[pending token + draft] (and the draft's branch on sequence 1) with logits at every row;
:func:`plookup.verify.accept` walks the rows and says which tokens come out; this module keeps the
KV cache and ``input_ids`` in step with them. Rejected draft tokens leave the cache
(``llama_memory_seq_rm``), so after every step the cache holds exactly ``input_ids[:n_tokens]``:
the prompt and every emitted token except the newest, which is "pending" and decoded at the head
of the next step. With a branch, the path taken ends up on sequence 0 and sequence 1 is emptied.

Each ``create_completion`` / ``create_chat_completion`` / ``generate`` call owns a :class:`Call`
(its :class:`~plookup.stats.SpecStats` and its prediction's tokens). llama_cpp's completion code and
chat handlers call ``generate`` with fixed arguments, so the call reaches it through a context
variable set for the duration of the call (and of each step of its stream), never through
attributes of the model.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import time
import warnings
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Callable, Generator, Iterator, Optional, Sequence

import llama_cpp
import llama_cpp._internals as internals
import numpy as np

from .batch import fill, verify_rows
from .costs import cached_cost_curve
from .draft import MEMORY, NO_DRAFT, Draft
from .drafters import IndexDrafter, check_max_draft, make_drafter
from .exactness import TILED_ENV, cached_invariance, model_params, recommended_settings
from .prediction import chunk_text, completion_text, prediction_text, prediction_usage
from .stats import SpecStats
from .verify import Sample, Verdict, accept

GGUF_MAGIC = b"GGUF"
COMPLETION_MAX_TOKENS = 16  # llama_cpp.Llama.create_completion's default max_tokens


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
    drafter's own when given (default: the drafter's, 16).
    ``cost_curve``: "auto" measures this model's verify-cost curve on this machine once (cached on
    disk, see :mod:`plookup.costs`); an array gives it; None keeps the drafter's own.
    ``exactness``: "auto" loads the model with the settings under which ``plookup doctor`` found
    its verify batches bitwise equal to single-token decoding (when it has run for this model and
    build), and probes the settings in force once (cached): ``.exact`` says the verdict, and
    ``usage["speculative"]["exact"]`` repeats it. None skips both (``.exact`` is None).
    ``use_extra_bufts``: llama.cpp's weight repacking (llama_model_params; default on, unless the
    doctor's settings say off).
    Everything else is ``llama_cpp.Llama``'s constructor; ``draft_model=`` is refused because it
    forces ``logits_all=True``, which this decoder does not need. A model whose memory cannot drop
    a suffix (recurrent, hybrid) decodes plainly, with a warning.

    The completions take an OpenAI-style ``prediction`` (see :mod:`plookup.prediction`) and report
    ``usage["speculative"]``; a streamed completion is a :class:`Stream`.
    """

    # The acceptance rule (a pure function, see plookup.verify); a test swaps in a broken one.
    acceptance = staticmethod(accept)

    def __init__(
        self,
        model_path: str,
        *args,
        drafter: Optional[IndexDrafter] = None,
        max_draft: Optional[int] = None,
        cost_curve="auto",
        exactness="auto",
        use_extra_bufts: Optional[bool] = None,
        **kwargs,
    ):
        # llama_cpp.Llama.__del__ closes self._stack; it must exist even if validation fails.
        self._stack = contextlib.ExitStack()
        if max_draft is not None:
            check_max_draft(max_draft)
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
        with model_params(repack):
            super().__init__(model_path, *args, **kwargs)
        # llama.cpp may round n_ctx up, but input_ids holds the requested n_ctx: create_completion
        # sizes max_tokens <= 0 by _n_ctx, and a generation it did not cap would lose its text.
        self._n_ctx = min(self._n_ctx, len(self.input_ids))
        self._recreate_context_with_two_sequences()
        self.drafter = drafter if drafter is not None else make_drafter()
        if max_draft is not None:
            self.drafter.max_draft = max_draft
        # Recurrent and hybrid memories cannot drop a suffix, so rejected draft tokens would stay.
        self.can_roll_back = not (self._is_recurrent or self._is_hybrid)
        self.exact: Optional[bool] = None
        if not self.can_roll_back:
            warnings.warn(f"plookup: {model_path} keeps a recurrent state that cannot drop rejected "
                          f"draft tokens; decoding it plainly, without speculation")  # fmt: skip
        else:
            self.drafter.warm_up()  # load the numba kernels now, not inside the first generation
            if isinstance(cost_curve, str) and cost_curve == "auto":
                cost_curve = cached_cost_curve(self)
            if cost_curve is not None:
                self.drafter.use_cost_curve(cost_curve)
            if exactness == "auto":
                self.exact = cached_invariance(self).invariant
                if self.exact:
                    # Exact single drafts beat a second branch: without flash attention its rows
                    # round differently (softmax over cells out of order), and a branch taken
                    # leaves its tokens in other cells than plain decoding would, so every later
                    # token would round differently too.
                    self.drafter.branches = False
        self.last_stats = SpecStats(exact=self.exact)  # a view of the latest call's stats

    @property
    def max_draft(self) -> int:
        return self.drafter.max_draft

    def _recreate_context_with_two_sequences(self) -> None:
        """Two-branch verification needs a second sequence id, sharing cells with the first
        (kv_unified: a split cache would also halve each sequence's context). llama_cpp.Llama
        offers no such parameter, so its context is replaced by one that has them."""
        params = self.context_params
        if params.n_seq_max >= 2 and params.kv_unified:
            return  # e.g. llama_cpp's embedding mode already made one
        params.n_seq_max = 2
        params.kv_unified = True
        self._ctx.close()  # free the first cache before allocating the second
        self._ctx = self._stack.enter_context(
            contextlib.closing(
                internals.LlamaContext(model=self._model, params=params, verbose=self.verbose)
            )
        )
        if self._lora_adapter is not None:
            adapters = (llama_cpp.llama_adapter_lora_p_ctypes * 1)(self._lora_adapter)
            scales = (ctypes.c_float * 1)(self.lora_scale)
            if llama_cpp.llama_set_adapters_lora(self._ctx.ctx, adapters, 1, scales):
                raise RuntimeError(f"Failed to set LoRA adapter from lora path: {self.lora_path}")

    # -- the public entry points keep llama_cpp's signatures; completions gain usage["speculative"]
    # and an optional OpenAI-style `prediction`

    def create_completion(self, *args, prediction=None, **kwargs):
        call, owner = self._call(prediction)
        # llama_cpp's create_completion(prompt, suffix=None, max_tokens=16, ...): <= 0 or None is
        # "up to the context", which the room left bounds anyway.
        max_tokens = kwargs.get("max_tokens", args[2] if len(args) > 2 else COMPLETION_MAX_TOKENS)
        call.max_tokens = max_tokens if isinstance(max_tokens, int) and max_tokens > 0 else None
        return self._deliver(call, owner, _within(call, super().create_completion, *args, **kwargs))

    def create_chat_completion(self, *args, prediction=None, **kwargs):
        # The chat handler generates through self.create_completion, which joins this call.
        call, owner = self._call(prediction)
        return self._deliver(call, owner, _within(call, super().create_chat_completion, *args, **kwargs))

    @contextlib.contextmanager
    def request(self, prediction=None, cancelled: Optional[Callable[[], bool]] = None) -> Iterator[Call]:
        """The create_* calls inside the block (and their streams) run as this one request: with
        this prediction, ending early once ``cancelled()`` is true, counted in the Call's stats.
        Its prediction's accounting is left to the caller (:meth:`prediction_details`): a server
        does it outside its model lock."""
        call = self._new_call(prediction, cancelled)
        token = _current_call.set(call)
        try:
            yield call
        finally:
            _current_call.reset(token)

    def _call(self, prediction) -> tuple[Call, bool]:
        """(the call, whether this entry point owns it): the running one (a chat handler's
        completion inside create_chat_completion, or any call inside :meth:`request`), or a new one."""
        running = _current_call.get()
        if prediction is None and running is not None:
            return running, False
        return self._new_call(prediction), True

    def _new_call(self, prediction, cancelled=None) -> Call:
        stats = SpecStats(exact=self.exact)  # before anything can fail: a failed call owns empty stats
        tokens = () if prediction is None else self.tokenize(prediction_text(prediction).encode("utf-8"), add_bos=False)
        return Call(stats, tokens, cancelled)

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
        call = _current_call.get() or Call(SpecStats(exact=self.exact))
        self.last_stats = stats = call.stats
        sampling = dict(
            top_k=top_k, top_p=top_p, min_p=min_p, typical_p=typical_p, temp=temp,
            repeat_penalty=repeat_penalty, frequency_penalty=frequency_penalty,
            presence_penalty=presence_penalty, tfs_z=tfs_z, mirostat_mode=mirostat_mode,
            mirostat_tau=mirostat_tau, mirostat_eta=mirostat_eta, penalize_nl=penalize_nl,
        )  # fmt: skip
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
        if logits_processor is not None or not self.can_roll_back:
            # A Python logits processor reads self._input_ids at every call, which during a
            # verify step would include unverified draft tokens: decode plainly instead.
            if logits_processor is not None:
                warnings.warn("plookup: logits_processor given, decoding without speculation")
            for token in super().generate(
                tokens, logits_processor=logits_processor, stopping_criteria=stopping_criteria,
                grammar=grammar, **sampling,
            ):  # fmt: skip
                if call.is_cancelled():
                    return
                stats.record_step(0, 0)
                stats.generated += 1
                yield token
            return
        yield from self._speculate(tokens, sampling, stopping_criteria, grammar, call)

    # -- the speculative loop

    def _speculate(self, tokens, sampling, stopping_criteria, grammar, call: Call):
        stats, drafter = call.stats, self.drafter
        self._mirostat_mu = ctypes.c_float(2.0 * sampling["mirostat_tau"])
        self._sampler = sampler = self._init_sampler(grammar=grammar, **sampling)
        sample = self._sample_function(sampler, randomly=sampling["temp"] != 0)  # llama_cpp: < 0 samples too
        if len(tokens) >= self._n_ctx:
            return  # prompt + output <= n_ctx, as llama_cpp caps it: no room for a token
        stats.prefill_tokens = self._prefill(tokens)
        # A prediction is history the drafter may continue a match into; this call only.
        drafter.start([*call.prediction, *tokens])
        kept = self.n_tokens  # cache entries that stay valid whatever happens next
        try:
            # The first token comes from the prompt's last row, as in plain decoding: a step that
            # drafts nothing is then plain's single-token decode, so the text equals plain's
            # until a verify batch rounds differently (never, where verification is exact).
            n_past = self.n_tokens - 1  # the prompt's last token plays the pending token's part
            stop = None if stopping_criteria is None else self._stop_function(stopping_criteria, n_past)
            verdict = self.acceptance([], lambda _: sample(-1), stop and (lambda prefix, _: stop(prefix, -1)))
            draft = path = NO_DRAFT  # what was verified, and the path taken through it
            while True:
                stats.record_step(len(path), verdict.accepted)
                if draft.branch is not None:
                    stats.branch_steps += 1
                    stats.alternative_taken += verdict.branch_taken
                if path.source == MEMORY:
                    stats.accepted_from_memory += verdict.accepted
                drafter.observe(path, verdict.accepted)
                drafter.observe_sampling(verdict.samples, verdict.most_likely)
                for i, token in enumerate(verdict.tokens):
                    # The caller may stop at any token; keep only what it has seen decoded.
                    kept = n_past + 1 + min(i + 1, verdict.accepted)
                    drafter.extend((token,))
                    stats.generated += 1
                    yield token
                if verdict.stopped or call.is_cancelled():
                    return
                pending, n_past = verdict.tokens[-1], self.n_tokens
                # Draft tokens that fit behind `pending` so that prompt + output stays <= n_ctx,
                # as llama_cpp caps it (the token sampled last is never evaluated).
                room = self._n_ctx - n_past - 2
                if room < 0:
                    return  # context full: the caller reports finish_reason "length"
                limit = min(room, self.n_batch - 1)
                if call.max_tokens is not None:  # a step emits accepted + 1 tokens
                    limit = min(limit, call.max_tokens - stats.generated - 1)
                t0 = time.perf_counter()
                draft = drafter.propose(limit) if self.can_roll_back else NO_DRAFT
                stats.draft_seconds += time.perf_counter() - t0
                verdict, path = self._step(pending, draft, n_past, sample, stopping_criteria)
        finally:
            self._truncate(kept)
            self._requires_eval = True  # the context's logits belong to a verify batch
            drafter.finish()  # e.g. remember this request in a cross-request memory

    def _step(self, pending: int, draft: Draft, n_past: int, sample: Sample, stopping_criteria) -> tuple[Verdict, Draft]:
        """Decode [pending + draft] (and its branch on sequence 1) at n_past, verify it, and leave
        the cache and input_ids holding pending and the accepted part of the path taken.

        Returns the verdict and the path: the draft, or its fork when the target took the branch.
        """
        memory, branch = self._ctx.memory, draft.branch
        if branch is not None:
            llama_cpp.llama_memory_seq_cp(memory, 0, 1, -1, -1)  # the branches share the whole prefix
        rolled_back = True
        try:
            fill(self, verify_rows(pending, draft.tokens, branch, n_past))
            self._ctx.decode(self._batch)
            self.input_ids[n_past] = pending
            stop = None if stopping_criteria is None else self._stop_function(stopping_criteria, n_past)
            verdict = self.acceptance(draft.tokens.tolist(), sample, stop, branch)
            path = draft
            if verdict.branch_taken:
                path = draft.fork()
                fork = n_past + 1 + branch.at  # first position where the branches differ
                rolled_back = llama_cpp.llama_memory_seq_rm(memory, 0, fork, -1)
                llama_cpp.llama_memory_seq_cp(memory, 1, 0, fork, -1)
        finally:
            if branch is not None:
                rolled_back &= llama_cpp.llama_memory_seq_rm(memory, 1, -1, -1)
        self.input_ids[n_past : n_past + 1 + len(path)] = [pending, *path.tokens.tolist()]
        self.n_tokens = n_past + 1 + len(path)
        keep = n_past + 1 + verdict.accepted
        if keep < self.n_tokens:  # drop the rejected draft tokens
            rolled_back &= self._ctx.kv_cache_seq_rm(-1, keep, -1)
        if not rolled_back:
            self._evaluate_afresh(keep)
        self.n_tokens = keep
        return verdict, path

    def _evaluate_afresh(self, n_tokens: int) -> None:
        """The memory refused to drop rejected draft tokens (llama_memory_seq_rm failed): never go
        on with them in it. Warn, stop drafting on this model, and rebuild the cache from the
        verified tokens input_ids[:n_tokens]."""
        warnings.warn("plookup: llama.cpp could not remove rejected draft tokens from the cache; "
                      "re-evaluating the verified tokens and decoding this model plainly from now on")  # fmt: skip
        self.can_roll_back = False
        tokens = self.input_ids[:n_tokens].tolist()
        self._ctx.kv_cache_clear()  # llama_memory_clear: every kind of memory can do that
        self.n_tokens = 0
        self.eval(tokens)

    def _sample_function(self, sampler, randomly: bool) -> Sample:
        """sample(row): the request's sampler chain on a batch row; at temperature > 0 also
        whether the sample was the most likely token (which scales the policy's prior)."""

        def sample(row: int):
            token = sampler.sample(self._ctx, row)  # y ~ p(· | prefix + draft[:i]); greedy: argmax
            if not randomly:
                return token, None
            return token, token == int(np.argmax(self._logits_row(row)))

        return sample

    def _stop_function(self, stopping_criteria, n_past: int):
        """stop(prefix, row): llama_cpp's stopping criteria on the tokens up to the pending one,
        then the verified `prefix` of the path, and the row's logits."""

        def stop(prefix: Sequence[int], row: int) -> bool:
            ids = np.concatenate((self.input_ids[: n_past + 1], np.asarray(prefix, dtype=self.input_ids.dtype)))
            return bool(stopping_criteria(ids, self._logits_row(row)))

        return stop

    def _prefill(self, prompt: list[int]) -> int:
        """Evaluate `prompt` with the llama_decode calls llama_cpp's plain generate makes: keep the
        longest cached prefix, decode the rest in n_batch chunks; when the whole prompt is cached,
        decode its last token again, since its logits are gone. Returns the tokens evaluated."""
        cached = 0
        for a, b in zip(self.input_ids[: self.n_tokens].tolist(), prompt):
            if a != b:
                break
            cached += 1
        reuse = cached - 1 if cached == len(prompt) else cached
        if reuse > 0 and self._ctx.kv_cache_seq_rm(-1, reuse, -1):
            self.n_tokens = reuse
        else:  # nothing to reuse, or a memory that cannot drop a suffix (llama_cpp does the same)
            self.reset()
        start = self.n_tokens
        self.eval(prompt[start:])
        return len(prompt) - start

    def _logits_row(self, i: int) -> np.ndarray:
        return np.ctypeslib.as_array(self._ctx.get_logits_ith(i), shape=(self._n_vocab,))

    def _truncate(self, n_tokens: int) -> None:
        # Unconditional: after a failed decode the cache may hold entries beyond n_tokens.
        if not self._ctx.kv_cache_seq_rm(-1, n_tokens, -1):
            self._ctx.kv_cache_clear()  # it holds more than input_ids says: start afresh next time
            self.n_tokens = 0
        self.n_tokens = min(self.n_tokens, n_tokens)
