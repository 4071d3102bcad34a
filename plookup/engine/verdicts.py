"""A generation's verdict on its rows of a step: which tokens come out, and its sequence rolled back
to them.

:func:`plookup.verify.accept.accept` walks the rows with the generation's sampler and stopping
criteria; the accepted part of the path taken (the draft, or its branch) stays in the sequence,
the rest is rolled back (the context handle's one ``roll_back``); the emitted tokens are counted,
written once into the slot's buffer at their positions (the newest, pending, just after the cells;
a rejected draft token never), indexed there by its drafter, read for logprobs where the call
asks, and queued for its consumer.
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np

from ..draft.values import CORPUS, MEMORY, NO_DRAFT, Draft
from .slot import Generation, Slot


def write(gen: Generation, at: int, tokens) -> None:
    """Emitted `tokens` into the slot's buffer from position `at` on, their one copy, and indexed
    there by the generation's drafter. The sizes keep them inside it (plookup.draft.sizing.room:
    prompt + output <= n_ctx <= the buffer's length), so that where the context is full the newest
    token, which has no cell, is the buffer's last; past it they would be refused, not cut."""
    end = at + len(tokens)
    if end > len(gen.slot.tokens):
        raise ValueError(f"{len(tokens)} tokens at position {at} overrun the slot's {len(gen.slot.tokens)}")
    gen.slot.tokens[at:end] = tokens
    gen.drafter.cover(end)


def fail(context, gen: Generation, error: BaseException) -> None:
    """End one generation with `error`; its cells go back to what it had before the step."""
    context.roll_back(gen.slot.seq, gen.slot.n)
    context.roll_back(gen.slot.branch_seq, 0)
    gen.error, gen.done = error, True


class Verdicts:
    """The verdicts of a step, on `context` (a :class:`~plookup.engine.handle.ContextHandle`):
    each generation's rows judged by `accept` (:func:`plookup.verify.accept.accept`, or a test's),
    its tokens handed out. `rebuild(slot, n)` is called where the memory refused to drop rejected
    draft tokens: the sequence must then be made anew from its verified tokens[:n] (the engine's
    :meth:`~plookup.engine.Engine.evaluate_afresh`, which touches every slot)."""

    def __init__(self, context, accept: Callable, rebuild: Callable[[Slot, int], None]):
        self.context, self.accept, self.rebuild = context, accept, rebuild

    def verdict(self, gen: Generation, draft: Draft, start: int) -> int:
        """:meth:`judge` the generation's rows; an error of its sampler or stopping criteria
        ends this generation only. Returns how many draft tokens were accepted."""
        try:
            return self.judge(gen, draft, start)
        except Exception as e:
            fail(self.context, gen, e)
            return 0

    def _sample(self, gen: Generation, start: int):
        """sample(row): the generation's sampler chain on its row `row` (batch row start + row);
        at temperature > 0 also whether the sample was the most likely token."""
        context, sampler = self.context, gen.sampler

        def sample(row: int):
            token = context.sample(sampler, start + row)  # y ~ p(· | prefix + draft[:row]); greedy: argmax
            if not gen.randomly:
                return token, None
            return token, token == int(np.argmax(context.logits_row(start + row)))

        return sample

    def _stop(self, gen: Generation, n_past: int, start: int):
        """stop(prefix, row): llama_cpp's stopping criteria on the tokens up to position n_past,
        then the verified `prefix`, and the row's logits."""
        criteria, slot, context = gen.stopping_criteria, gen.slot, self.context
        if criteria is None:
            return None

        def stop(prefix, row: int) -> bool:
            ids = np.concatenate((slot.tokens[: n_past + 1], np.asarray(prefix, dtype=slot.tokens.dtype)))
            return bool(criteria(ids, context.logits_row(start + row)))

        return stop

    def _accept(self, gen: Generation, draft: list[int], start: int, n_past: int, branch):
        """The acceptance rule on the generation's rows from batch row `start` on, timed as its
        sampling (what the host spends reading the rows)."""
        begin = time.perf_counter()
        try:
            return self.accept(draft, self._sample(gen, start), self._stop(gen, n_past, start), branch)
        finally:
            gen.call.stats.sample_seconds += time.perf_counter() - begin

    def first_token(self, gen: Generation, row: int) -> None:
        """The first token comes from the prompt's last row, as in plain decoding: a step that
        drafts nothing is then plain's single-token decode."""
        n_past = gen.slot.n - 1
        verdict = self._accept(gen, [], row, n_past, None)
        write(gen, n_past + 1, verdict.tokens)
        self._emit(gen, NO_DRAFT, NO_DRAFT, verdict, row)

    def judge(self, gen: Generation, draft: Draft, start: int) -> int:
        """Verify the generation's rows and leave its sequence holding the pending token and the
        accepted part of the path taken (the draft, or its fork when the target took the branch);
        returns how many draft tokens were accepted. The pending token, ``tokens[n_past]``, is
        the buffer's already."""
        context, slot, branch = self.context, gen.slot, draft.branch
        n_past = slot.n
        rolled_back = True
        try:
            verdict = self._accept(gen, draft.tokens.tolist(), start, n_past, branch)
            path = draft
            if verdict.branch_taken:
                path = draft.fork()
                fork = n_past + 1 + branch.at  # first position where the branches differ
                rolled_back = context.roll_back(slot.seq, fork)
                context.copy(slot.branch_seq, slot.seq, fork, -1)
        finally:
            if branch is not None:
                rolled_back &= context.roll_back(slot.branch_seq, 0)
        write(gen, n_past + 1, verdict.tokens)  # (before a rebuild reads the cells' tokens)
        keep = n_past + 1 + verdict.accepted
        if keep < n_past + 1 + len(path):  # drop the rejected draft tokens
            rolled_back &= context.roll_back(slot.seq, keep)
        if not rolled_back:
            self.rebuild(slot, keep)
        slot.n = keep
        self._emit(gen, draft, path, verdict, start)
        return verdict.accepted

    def _emit(self, gen: Generation, draft: Draft, path: Draft, verdict, start: int) -> None:
        """Hand the verdict's tokens to the consumer (their rows begin at batch row `start`)."""
        stats = gen.call.stats
        stats.record_step(len(path), verdict.accepted)
        if draft.branch is not None:
            stats.branch_steps += 1
            stats.alternative_taken += verdict.branch_taken
        if path.source == MEMORY:
            stats.accepted_from_memory += verdict.accepted
        elif path.source == CORPUS:
            stats.accepted_from_corpus += verdict.accepted
        gen.drafter.observe(path, verdict.accepted)
        gen.drafter.observe_sampling(verdict.samples, verdict.most_likely)
        if verdict.tokens:
            if gen.call.logprobs is not None:  # before the tokens go out: their consumer reads both
                self._read_logprobs(gen, verdict, start)
            gen.emitted += len(verdict.tokens)
            gen.out.extend(verdict.tokens)
        if verdict.stopped:
            gen.done = True

    def _read_logprobs(self, gen: Generation, verdict, start: int) -> None:
        """Each emitted token's logprobs from the row that chose it, before the next decode
        overwrites the rows (host time reading rows, counted as sampling)."""
        begin = time.perf_counter()
        for token, row in zip(verdict.tokens, verdict.rows, strict=True):
            gen.call.logprobs.read(self.context.logits_row(start + row), token)
        gen.call.stats.sample_seconds += time.perf_counter() - begin
