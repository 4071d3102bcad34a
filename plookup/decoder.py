"""`plookup.Llama`: llama_cpp.Llama whose token generator decodes speculatively.

One step: decode [pending token + draft] in a single ``llama_decode`` with logits at each of those
positions, then sample position by position with the request's own llama.cpp sampler chain:

    for i, x in enumerate(draft):
        y = sample(logits[i])          # the target's token at this position
        emit y
        if y != x: break               # first disagreement: the rest of the draft is void
    else:
        emit sample(logits[len(draft)])  # all accepted: one more token for free

For greedy sampling that is "the longest draft prefix equal to the argmax, plus the target's next
token". For temperature > 0 it is Leviathan et al.'s rejection rule with a point-mass draft q = δ_x:
accept x with probability min(1, p(x)/q(x)) = p(x), i.e. exactly when a sample y ~ p equals x; on
rejection the residual norm(max(0, p - q)) is p restricted to y ≠ x, which is what y already is.
Sampling sequentially through the chain also means penalties and grammars see verified tokens only.

Rejected draft tokens are removed from the KV cache, so after every step the cache holds exactly
``input_ids[:n_tokens]``: the prompt and every emitted token except the newest, which is "pending"
and decoded at the head of the next step.

When the drafter proposes a second branch (``drafter.alternative``: the draft forks at position k),
both are verified in the same ``llama_decode``: [pending + draft[:k]] on sequences {0, 1}, the rest
of the draft on sequence 0 and the alternative on sequence 1, at the same positions. Acceptance
walks the draft; if the target's token at k is the alternative's instead, it walks on along the
alternative's rows. Each position is still sampled once, so the rule above stays exact. The branch
taken ends up on sequence 0 and sequence 1 is emptied.
"""

from __future__ import annotations

import contextlib
import ctypes
import time
import warnings
from typing import Generator, Optional, Sequence

import llama_cpp
import llama_cpp._internals as internals
import numpy as np

from .batch import fill_batch, fill_two_branch_batch
from .costcache import cached_cost_curve
from .drafters import IndexDrafter, SuffixDrafter
from .policy import validate_cost_curve
from .prediction import prediction_text, prediction_usage
from .stats import SpecStats

GGUF_MAGIC = b"GGUF"
DEFAULT_MAX_DRAFT = 16


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


class Llama(llama_cpp.Llama):
    """A drop-in ``llama_cpp.Llama`` that drafts from its own context and verifies in one batch.

    ``drafter``: a :class:`plookup.SuffixDrafter` (default) or :class:`plookup.NgramDrafter`.
    ``max_draft``: the most draft tokens verified per step (0 turns drafting off).
    ``cost_curve``: "auto" measures this model's verify-cost curve on this machine once (cached on
    disk, see :mod:`plookup.costcache`); an array gives it; None keeps the drafter's own.
    Everything else is ``llama_cpp.Llama``'s constructor; ``draft_model=`` is refused because it
    forces ``logits_all=True``, which this decoder does not need.
    """

    def __init__(
        self,
        model_path: str,
        *args,
        drafter: Optional[IndexDrafter] = None,
        max_draft: int = DEFAULT_MAX_DRAFT,
        cost_curve="auto",
        **kwargs,
    ):
        # llama_cpp.Llama.__del__ closes self._stack; it must exist even if validation fails.
        self._stack = contextlib.ExitStack()
        if not isinstance(max_draft, int) or max_draft < 0:
            raise ValueError(f"max_draft must be an integer >= 0, got {max_draft!r}")
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
        super().__init__(model_path, *args, **kwargs)
        # llama.cpp may round n_ctx up, but input_ids holds the requested n_ctx: create_completion
        # sizes max_tokens <= 0 by _n_ctx, and a generation it did not cap would lose its text.
        self._n_ctx = min(self._n_ctx, len(self.input_ids))
        self._recreate_context_with_two_sequences()
        self.drafter = drafter if drafter is not None else SuffixDrafter()
        self.drafter.warm_up()  # load the numba kernels now, not inside the first generation
        if isinstance(cost_curve, str) and cost_curve == "auto":
            cost_curve = cached_cost_curve(self)
        if cost_curve is not None:
            self.drafter.policy.cost = validate_cost_curve(cost_curve)
        self.max_draft = max_draft
        self.last_stats = SpecStats()
        self._prediction_tokens: list[int] = []  # indexed ahead of the next generation's prompt

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
    # and an optional OpenAI-style `prediction` (see plookup.prediction)

    def create_completion(self, *args, prediction=None, **kwargs):
        if prediction is not None:
            return self._predicted(self.create_completion, prediction, args, kwargs)
        result = super().create_completion(*args, **kwargs)
        if isinstance(result, dict):
            result["usage"]["speculative"] = self.last_stats.as_dict()
        return result

    def create_chat_completion(self, *args, prediction=None, **kwargs):
        # The chat handler generates through self.create_completion, which adds the stats.
        if prediction is not None:
            return self._predicted(self.create_chat_completion, prediction, args, kwargs)
        return super().create_chat_completion(*args, **kwargs)

    def _predicted(self, create, prediction, args, kwargs):
        """`create(*args, **kwargs)` (a create_* method, called without prediction) with the
        prediction's tokens as a draft source.

        Non-streamed results gain ``usage["completion_tokens_details"]``.
        """
        tokens = self.tokenize(prediction_text(prediction).encode("utf-8"), add_bos=False)
        if kwargs.get("stream"):
            return self._stream_predicted(create, tokens, args, kwargs)
        self._prediction_tokens = tokens
        try:
            result = create(*args, **kwargs)
        finally:
            self._prediction_tokens = []
        choice = result["choices"][0]
        text = choice["text"] if "text" in choice else choice["message"]["content"] or ""
        completion = self.tokenize(text.encode("utf-8"), add_bos=False)
        result["usage"]["completion_tokens_details"] = prediction_usage(tokens, completion)
        return result

    def _stream_predicted(self, create, tokens, args, kwargs):
        self._prediction_tokens = tokens
        try:
            yield from create(*args, **kwargs)
        finally:
            self._prediction_tokens = []

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
        self.last_stats = SpecStats()
        if logits_processor is not None:
            # A Python logits processor reads self._input_ids at every call, which during a
            # verify step would include unverified draft tokens: decode plainly instead.
            warnings.warn("plookup: logits_processor given, decoding without speculation")
            for token in super().generate(
                tokens, logits_processor=logits_processor, stopping_criteria=stopping_criteria,
                grammar=grammar, **sampling,
            ):  # fmt: skip
                self.last_stats.record_step(0, 0)
                self.last_stats.generated += 1
                yield token
            return
        yield from self._speculate(tokens, sampling, stopping_criteria, grammar)

    # -- the speculative loop

    def _speculate(self, tokens, sampling, stopping_criteria, grammar):
        self._mirostat_mu = ctypes.c_float(2.0 * sampling["mirostat_tau"])
        self._sampler = sampler = self._init_sampler(grammar=grammar, **sampling)
        self._samples_randomly = sampling["temp"] != 0  # llama_cpp: 0 is greedy, < 0 samples too
        self._prefill(tokens[:-1])
        stats = self.last_stats
        drafter = self.drafter
        # A prediction is history the drafter may continue a match into; this generation only.
        drafter.start([*self._prediction_tokens, *tokens])
        self._prediction_tokens = []
        pending = tokens[-1]
        kept = self.n_tokens  # cache entries that stay valid whatever happens next
        try:
            while True:
                n_past = self.n_tokens
                # Draft tokens that fit behind `pending` so that prompt + output stays <= n_ctx,
                # as llama_cpp caps it (the token sampled last is never evaluated).
                room = self._n_ctx - n_past - 2
                if room < 0:
                    return  # context full: the caller reports finish_reason "length"
                t0 = time.perf_counter()
                draft = drafter.propose(min(self.max_draft, room, self.n_batch - 1))
                stats.draft_seconds += time.perf_counter() - t0

                if drafter.alternative is None:
                    self._decode_all_logits([pending, *draft.tolist()], n_past)
                    emitted, stopped = self._verify(sampler, draft, n_past, stopping_criteria)
                else:
                    draft, emitted, stopped = self._verify_two_branches(
                        sampler, pending, draft.tolist(), drafter.alternative, n_past,
                        stopping_criteria,
                    )  # fmt: skip
                accepted = len(emitted) if stopped else len(emitted) - 1
                self._truncate(n_past + 1 + accepted)  # drop the rejected draft tokens
                stats.record_step(len(draft), accepted)
                drafter.observe(len(draft), accepted)
                if drafter.last_source == "memory":
                    stats.accepted_from_memory += accepted

                for i, token in enumerate(emitted):
                    # The caller may stop at any token; keep only what it has seen decoded.
                    kept = n_past + 1 + min(i + 1, accepted)
                    drafter.extend((token,))
                    stats.generated += 1
                    yield token
                if stopped:
                    return
                pending = emitted[-1]
        finally:
            self._truncate(kept)
            self._requires_eval = True  # the context's logits belong to a verify batch
            drafter.finish()  # e.g. remember this request in a cross-request memory

    def _verify(
        self, sampler, draft, n_past, stopping_criteria, alternative=None
    ) -> tuple[list[int], bool]:
        """The acceptance rule, over the logits of the batch [pending, *draft] just decoded.

        Returns the emitted tokens (the accepted draft prefix, then the target's own token) and
        whether a stopping criterion ended the generation. ``alternative``: (k, branch, rows) when
        the batch also holds the fork draft[:k] + branch, its logits after draft[:k] + branch[:j]
        at batch row rows[k + j]; the walk switches to it when the target's token at k is branch[0].
        """
        emitted: list[int] = []
        rows = range(len(draft) + 1)  # batch row of the logits after draft[:i]
        i = 0
        while True:
            row = rows[i]
            token = sampler.sample(self._ctx, row)  # y ~ p(· | prefix + draft[:i]); greedy: argmax
            if self._samples_randomly:  # how often y is the argmax scales the policy's prior
                most_likely = int(np.argmax(self._logits_row(row)))
                self.drafter.observe_sampling(1, int(token == most_likely))
            if stopping_criteria is not None and stopping_criteria(
                self.input_ids[: n_past + 1 + i], self._logits_row(row)
            ):
                return emitted, True  # like llama_cpp: the token that tripped it is dropped
            emitted.append(token)
            if alternative is not None and i == alternative[0] and token == alternative[1][0]:
                k, branch, rows = alternative
                draft = [*draft[:k], *branch]
                self.input_ids[n_past + 1 + k : n_past + 1 + len(draft)] = branch
            if i == len(draft) or token != draft[i]:
                break  # y != x: the draft is rejected from here on, y is the correction
            i += 1
        return emitted, False

    def _verify_two_branches(self, sampler, pending, draft, alternative, n_past, stopping_criteria):
        """Decode and verify `draft` and the fork draft[:k] + branch (``alternative = (k, branch)``)
        in one batch on sequences 0 and 1; leave the branch taken on sequence 0, nothing on 1.

        Returns (the path taken: draft or the fork, emitted tokens, stopped).
        """
        k, branch = alternative[0], alternative[1].tolist()
        memory = self._ctx.memory
        fork = n_past + 1 + k  # first position where the branches differ
        llama_cpp.llama_memory_seq_cp(memory, 0, 1, -1, -1)  # the branches share the whole prefix
        try:
            fill_two_branch_batch(self, [pending, *draft[:k]], draft[k:], branch, n_past)
            self._ctx.decode(self._batch)
            self.input_ids[n_past : n_past + 1 + len(draft)] = [pending, *draft]
            self.n_tokens = n_past + 1 + len(draft)
            # rows[i]: the logits after fork[:i]; the fork's own rows follow the draft's.
            rows = [*range(k + 1), *range(len(draft) + 1, len(draft) + 1 + len(branch))]
            emitted, stopped = self._verify(
                sampler, draft, n_past, stopping_criteria, (k, branch, rows)
            )
            self.last_stats.branch_steps += 1
            if len(emitted) > k and emitted[k] == branch[0]:
                self.last_stats.alternative_taken += 1
                llama_cpp.llama_memory_seq_rm(memory, 0, fork, -1)
                llama_cpp.llama_memory_seq_cp(memory, 1, 0, fork, -1)
                draft = [*draft[:k], *branch]
                self.n_tokens = n_past + 1 + len(draft)
        finally:
            llama_cpp.llama_memory_seq_rm(memory, 1, -1, -1)
        return np.asarray(draft, dtype=np.int32), emitted, stopped

    def _prefill(self, prompt: list[int]) -> None:
        """Make the cache hold exactly `prompt`, reusing the longest cached prefix."""
        cached = 0
        for a, b in zip(self._input_ids.tolist(), prompt):
            if a != b:
                break
            cached += 1
        if not self._ctx.kv_cache_seq_rm(-1, cached, -1):
            # Recurrent/hybrid memories cannot drop a suffix: start over.
            self.reset()
            self._ctx.kv_cache_clear()
            cached = 0
        self.n_tokens = cached
        if cached < len(prompt):
            self.eval(prompt[cached:])

    def _decode_all_logits(self, batch_tokens: list[int], n_past: int) -> None:
        """One llama_decode of `batch_tokens` at positions n_past.., logits at every position."""
        fill_batch(self, batch_tokens, n_past)
        self._ctx.decode(self._batch)
        self.input_ids[n_past : n_past + len(batch_tokens)] = batch_tokens
        self.n_tokens = n_past + len(batch_tokens)

    def _logits_row(self, i: int) -> np.ndarray:
        return np.ctypeslib.as_array(self._ctx.get_logits_ith(i), shape=(self._n_vocab,))

    def _truncate(self, n_tokens: int) -> None:
        # Unconditional: after a failed decode the cache may hold entries beyond n_tokens.
        self._ctx.kv_cache_seq_rm(-1, n_tokens, -1)
        self.n_tokens = min(self.n_tokens, n_tokens)
