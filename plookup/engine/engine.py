"""The engine: one llama_context, N slots, one ``llama_decode`` per step for every generation.

A step gathers, for every generation that wants tokens, its rows: a decoding generation's pending
token and draft (:func:`plookup.verify.rows.verify_rows`, on its own sequence), and a prefilling one's
next chunk of prompt (logits at the chunk's last row only, as llama_cpp's ``eval`` asks). One
decode; then :func:`plookup.verify.accept.accept` judges each generation's rows, each one's rejected draft
tokens leave its own sequence, and the tokens it emits wait in its ``out`` queue for its consumer.

Drafts: a lone decoding generation drafts with its policy as a single stream does (a second branch
included where the context has branch sequences); several are sized together for the step's cost
(:func:`plookup.draft.sizing.size_batch`, or :func:`~plookup.draft.sizing.size_streams` where every slot has a KV
stream of its own, as it has with several slots): a busy batch drafts less, a full one nothing.

Threads: each request's thread consumes its own generation (:meth:`Engine.tokens`). A consumer
whose queue is empty steps if the context is free; that step advances every generation, so the
others find their tokens waiting, and a consumer that finds the context taken waits for the step
to end rather than for the context (a lock is not fair: a thread stepping in a loop would get it
back first). Requests waiting for a slot and generations given back are queued, and whoever
holds the context next hands out and takes back the slots. With one slot this is a single
stream's loop, on the caller's thread, with nothing in between.

Exactness: a generation that never shared a step or the cache with another sequence is decoded
as a lone stream is. One that did is claimed exact only where ``shared_exact`` says the layout
keeps a slot's rows its lone decode (a KV stream per slot, measured by
:func:`plookup.measure.exactness.probe_slots`); elsewhere its ``stats.exact`` becomes False, since in a
unified cache its cells interleave with the others' and its rows round differently.
"""

from __future__ import annotations

import contextlib
import threading
import time
import warnings
from collections import deque
from dataclasses import dataclass
from typing import Iterator, Optional

import llama_cpp
import numpy as np

from ..draft.sizing import size_batch, size_streams
from ..draft.values import CORPUS, MEMORY, NO_DRAFT, Draft
from ..verify.accept import accept
from ..verify.backend import BackendGreedy, Chains
from ..verify.rows import decode_chunks, fill, last_row_logits, sequence_rows, verify_rows
from .slot import Generation, Slot

# Tokens a generation may be stepped ahead of its consumer by the other consumers' steps: enough
# that a consumer busy with its last tokens does not drop out of the next batch, few enough that a
# client that has stopped reading does not make the others verify tokens nobody takes.
AHEAD = 48


@dataclass(frozen=True)
class StepRecord:
    """What one step did and where its time went (``Engine.trace``; ``plookup bench --trace``)."""

    began: float  # time.perf_counter() at the step's start
    host_before: float  # seconds: drafting, the batch's rows
    decode: float  # seconds inside llama_decode
    host_after: float  # seconds: each generation's verdict, prompt chunks taken in
    rows: int
    drafted: list[int]  # each decoding generation's draft length
    accepted: list[int]  # ... and how many of it were accepted
    prefilled: int  # prompt tokens of prefilling generations in the step


class Engine:
    """The slots of one ``plookup.Llama`` and the step that advances them all."""

    def __init__(self, llm, n_slots: int, branch_sequences: bool = True, shared_exact: bool = False,
                 streams: bool = False):
        """`branch_sequences`: the context has a second sequence per slot for a draft's branch
        (without, drafts must carry none). `shared_exact`: a slot's rows beside other slots' are
        bitwise its lone decode here (measured: :func:`plookup.measure.exactness.probe_slots`).
        `streams`: each slot's sequence has a KV stream of its own (see :mod:`.streams`)."""
        self.llm = llm
        size = len(llm.input_ids)
        # Slot i decodes on sequence i and verifies a draft's second branch on sequence n_slots + i.
        branch = (lambda i: n_slots + i) if branch_sequences else (lambda i: -1)
        self.slots = [Slot(0, 0, branch(0), model=llm)]
        self.slots += [Slot(i, i, branch(i), size=size) for i in range(1, n_slots)]
        self.shared_exact = shared_exact
        self.size_drafts = size_streams if streams else size_batch  # several slots' drafts together
        self.accept = accept  # the acceptance rule (a pure function, plookup.verify.accept)
        # The context: held by whoever steps or changes the cache, never waited for by a thread
        # that has something else to do (a lock is not fair, and a consumer stepping in a loop
        # would get it back before a waiting one woke up).
        self._lock = threading.Lock()
        # Under its own lock: the requests waiting for a slot, the generations given back, and
        # the signal that a step has ended, a slot was freed or a request is waiting.
        self._changed = threading.Condition()
        self._waiting: deque[Generation] = deque()
        self._given_back: deque[Generation] = deque()
        self._held = False  # one caller has the whole context (see exclusive)
        self.steps = 0  # decodes made, and their rows: what /metrics reports
        self.rows = 0
        self.trace: Optional[list[StepRecord]] = None  # a list: every step appends its record
        # Backend greedy chains on the slots whose latest generation sampled with them (attaching
        # or detaching costs a graph reserve: see plookup.verify.backend).
        self.chains = Chains(llm._ctx)

    @property
    def memory(self):
        return self.llm._ctx.memory

    def active(self) -> int:
        return sum(slot.generation is not None for slot in self.slots)

    # -- whoever holds the context does the bookkeeping others asked for

    def _run(self, work) -> bool:
        """Run `work()` holding the context if it is free now, after handing out the slots and
        taking back the generations that others left queued; False if another thread holds it."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            self._take_back()
            self._hand_out()
            work()
        finally:
            self._lock.release()
            with self._changed:
                self._changed.notify_all()
        return True

    def _wait(self, until, work=None) -> None:
        """Until `until()`: `work` (a step) whenever the context is free, or else the queued
        bookkeeping; when another thread holds the context, wait for its signal (with a short
        timeout: the signal may come just before the wait)."""
        while not until():
            if self._run(work or (lambda: None)) and work is not None:
                continue
            with self._changed:
                if not until():
                    self._changed.wait(timeout=0.01)

    # -- admission and release

    def admit(self, prompt: list[int], call, sampler, randomly: bool, stopping_criteria) -> Generation:
        """Queue the request and wait for a slot: the free one whose cells share the longest prefix
        with `prompt` (editors resend the same file every turn). That prefix is kept, the rest is
        prefilled in the steps to come."""
        gen = Generation(None, call, None, sampler, randomly, stopping_criteria, list(prompt))
        with self._changed:
            self._waiting.append(gen)
        self._wait(lambda: gen.slot is not None or gen.error is not None)
        if gen.slot is None:
            raise gen.error
        return gen

    def _hand_out(self) -> None:
        """Slots to waiting requests, first come first served (under the context)."""
        while True:
            with self._changed:
                if not self._waiting or self._held:
                    return
                self._supersede()
                free = [s for s in self.slots if s.generation is None]
                if not free:
                    return
                gen = self._waiting.popleft()
            slot = max(free, key=lambda s: (s.shared_prefix(gen.prompt), -s.index))
            gen.drafter = self._drafter(slot)
            try:
                self._keep_prefix(slot, gen)
                gen.drafter.start([*gen.call.prediction, *gen.prompt])  # a prediction is history to draft from
                if isinstance(gen.sampler, BackendGreedy):
                    self.chains.attach((slot.seq, slot.branch_seq))
                else:
                    self.chains.detach((slot.seq, slot.branch_seq))
            except Exception as e:
                gen.error = e  # raised in the requesting thread
                continue
            slot.generation, gen.slot = gen, slot

    def _drafter(self, slot: Slot):
        """Slot 0 drafts with the model's drafter, and every other slot with one it spawned from it
        and keeps, index included, between requests like slot 0 (a follow-up request indexes only
        its new tokens), spawned again only once the model's drafter or its settings changed."""
        model = self.llm.drafter
        if slot.index == 0:
            return model
        # (a tuple compares the objects by identity, the numbers by value)
        made_from = (model, model.policy, getattr(model, "corpus", None), model.max_draft, model.branches)
        if slot.drafter is None or slot.drafter_made_from != made_from:
            slot.drafter, slot.drafter_made_from = model.spawn(), made_from
        return slot.drafter

    def _keep_prefix(self, slot: Slot, gen: Generation) -> None:
        prompt = gen.prompt
        cached = slot.shared_prefix(prompt)
        # A whole cached prompt decodes its last token again: its logits are gone.
        reuse = cached - 1 if cached == len(prompt) else cached
        if not (reuse > 0 and self._seq_rm(slot.seq, reuse)):
            reuse = 0
            if not self._seq_rm(slot.seq, 0):
                raise RuntimeError(f"llama.cpp could not clear sequence {slot.seq} of the cache")
        slot.n = reuse
        gen.call.stats.prefill_tokens = len(prompt) - reuse

    def release(self, gen: Generation) -> None:
        """The consumer is done. Its generation ends now; its slot is taken back by whoever holds
        the context next (now, if it is free: a finalizer inside a step cannot have it)."""
        gen.done = True
        slot = gen.slot
        if slot is not None and slot.generation is gen:  # still its own: its cells are this generation's
            # what the cache holds of what its consumer took, as _take_back keeps it: a token a
            # stopping criterion fired on inside a verified draft is there, for llama_cpp's
            # after-loop check to find, as in llama_cpp's own loop, which evaluates it first
            gen.history = slot.tokens[: min(len(gen.prompt) + gen.taken, slot.n)].copy()
        with self._changed:
            self._given_back.append(gen)
        self._run(lambda: None)

    def _take_back(self) -> None:
        """Keep in the cache only what each given-back generation's consumer took (the newest
        token is never in it), forget its branch, let its drafter finish, free its slot."""
        while True:
            with self._changed:
                if not self._given_back:
                    return
                gen = self._given_back.popleft()
            slot = gen.slot
            if slot is None or slot.generation is not gen:
                continue
            try:
                keep = min(len(gen.prompt) + gen.taken, slot.n)
                if not self._seq_rm(slot.seq, keep):  # unconditional: a failed decode may leave cells
                    self._seq_rm(slot.seq, 0)
                    keep = 0
                slot.n = keep
                self._seq_rm(slot.branch_seq, 0)
                if slot.index == 0:
                    self.llm._requires_eval = True  # the context's logits belong to a verify batch
                gen.drafter.finish()  # e.g. remember this request in a cross-request memory
            finally:
                if gen.shared and gen.call.stats.exact:
                    gen.call.stats.exact = False
                slot.generation = None

    def forget(self) -> None:
        """Drop the cells of every idle slot (a benchmark's runs then each prefill afresh)."""

        def drop():
            for slot in self.slots:
                if slot.generation is None and self._seq_rm(slot.seq, 0):
                    slot.n = 0

        self._wait_for(drop)

    def _wait_for(self, work) -> None:
        """`work()` once, holding the context."""
        done = []
        self._wait(lambda: bool(done), lambda: done.append(work()))

    def _supersede(self) -> None:
        """With one slot, a new generation takes the model from one whose consumer has not
        closed it (a stream left half read), as llama_cpp's own generate does: waiting for it
        could wait forever on the very thread that holds it. The old one ends with an error.
        Under the context and the condition's lock."""
        gen = self.slots[0].generation
        if len(self.slots) == 1 and gen is not None:
            gen.error = RuntimeError("a newer generation on this model (parallel=1) ended this one before it was closed")
            gen.done = True
            self._given_back.append(gen)
            self._take_back()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """The whole context for llama_cpp's own plain decoding on sequence 0, whose cache
        operations cover every sequence: admit none meanwhile, wait until no generation runs, and
        empty the other slots' cells; the context is this caller's until the block ends."""
        with self._changed:
            while self._held:
                self._changed.wait()
            self._held = True
        try:
            while True:
                if self._lock.acquire(blocking=False):
                    self._take_back()
                    with self._changed:
                        self._supersede()
                    if not self.active():
                        break
                    self._lock.release()
                with self._changed:
                    self._changed.wait(timeout=0.01)
            try:
                self.chains.detach()  # llama_cpp's loop reads sequence 0's logits
                for slot in self.slots[1:]:
                    self._seq_rm(slot.seq, 0)
                    slot.n = 0
                yield
            finally:
                self._lock.release()
        finally:
            with self._changed:
                self._held = False
                self._changed.notify_all()

    # -- consuming

    def tokens(self, gen: Generation) -> Iterator[int]:
        """The generation's tokens as its consumer takes them; stepping the engine whenever none
        is waiting and no other thread is stepping. Raises the generation's error after the
        tokens emitted before it."""
        try:
            while True:
                if not gen.out:
                    self._wait(lambda: bool(gen.out) or gen.done, self._step)
                    if not gen.out:
                        if gen.error is not None:
                            raise gen.error
                        return
                token = gen.out.popleft()
                gen.taken += 1
                gen.call.stats.generated += 1
                yield token
        finally:
            self.release(gen)

    # -- the step

    def _wants(self, gen: Generation) -> bool:
        if gen.done:
            return False
        if not gen.out:
            return True  # its consumer is waiting (or will be): always step it
        if len(gen.out) >= AHEAD:
            return False
        if gen.call.max_tokens is not None and gen.emitted >= gen.call.max_tokens:
            return False  # its caller takes no more
        # llama_cpp's completions end at an end-of-generation token: do not decode past one
        # before the consumer asks for more.
        return not llama_cpp.llama_vocab_is_eog(self.llm._model.vocab, gen.out[-1])

    def _step(self) -> None:
        llm = self.llm
        decoding: list[Generation] = []
        prefilling: list[Generation] = []
        for slot in self.slots:
            gen = slot.generation
            if gen is None or not self._wants(gen):
                continue
            if gen.call.is_cancelled():
                gen.done = True  # e.g. the client hung up: this generation ends here
            elif gen.prefilling:
                prefilling.append(gen)
            elif self._room(slot) < 0:
                gen.done = True  # context full: the caller reports finish_reason "length"
            else:
                decoding.append(gen)
        if not decoding and not prefilling:
            return
        began = time.perf_counter()
        drafts = self._drafts(decoding, reserve=len(prefilling))
        rows: list = []
        logits: list[bool] = []
        parts = []  # (generation, draft, its first row)
        for gen, draft in zip(decoding, drafts):
            slot = gen.slot
            slot.tokens[slot.n] = gen.pending
            parts.append((gen, draft, len(rows)))
            new = verify_rows(gen.pending, draft.tokens, draft.branch, slot.n, (slot.seq, slot.branch_seq))
            rows += new
            logits += [True] * len(new)
            if draft.branch is not None:
                assert slot.branch_seq >= 0, "a draft with a branch on a context without branch sequences"
                # the branches share the whole prefix
                llama_cpp.llama_memory_seq_cp(self.memory, slot.seq, slot.branch_seq, -1, -1)
        chunks = []  # (generation, its first row, its prompt chunk)
        budget = llm.n_batch - len(rows)
        for gen in prefilling:
            if budget <= 0:
                break
            slot = gen.slot
            chunk = gen.prompt[slot.n : slot.n + budget]
            chunks.append((gen, len(rows), chunk))
            rows += sequence_rows(chunk, slot.n, slot.seq)
            logits += last_row_logits(len(chunk))
            budget -= len(chunk)
        stepped = [part[0] for part in parts] + [chunk[0] for chunk in chunks]
        others = [s for s in self.slots if s.n > 0 and s.generation not in stepped]
        if not self.shared_exact and (len(stepped) > 1 or others):
            for gen in stepped:
                gen.shared = True
        fill(llm, rows, logits)
        decoding_began = time.perf_counter()
        try:
            llm._ctx.decode(llm._batch)
        except Exception as e:  # the whole batch failed: so did every generation in it
            for gen in stepped:
                self._fail(gen, e)
            return
        finally:
            self.steps += 1
            self.rows += len(rows)
        decoded = time.perf_counter()
        accepted = []
        for gen, draft, start in parts:
            try:
                accepted.append(self._judge(gen, draft, start))
            except Exception as e:  # its sampler or stopping criteria: this generation only
                accepted.append(0)
                self._fail(gen, e)
        for gen, start, chunk in chunks:
            slot = gen.slot
            slot.tokens[slot.n : slot.n + len(chunk)] = chunk
            slot.n += len(chunk)
            if slot.n == len(gen.prompt):
                try:
                    self._first_token(gen, start + len(chunk) - 1)
                except Exception as e:
                    self._fail(gen, e)
        if self.trace is not None:
            self.trace.append(StepRecord(began, decoding_began - began, decoded - decoding_began,
                                         time.perf_counter() - decoded, len(rows), [len(d) for d in drafts],
                                         accepted, sum(len(chunk) for _, _, chunk in chunks)))

    def _drafts(self, decoding: list[Generation], reserve: int) -> list[Draft]:
        """Each decoding generation's draft; `reserve` rows stay free for prefill chunks."""
        llm = self.llm
        if not decoding or not llm.can_roll_back:
            return [NO_DRAFT] * len(decoding)
        limits = []
        for gen in decoding:
            limit = min(self._room(gen.slot), llm.n_batch - len(decoding) - reserve)
            if gen.call.max_tokens is not None:  # a step emits accepted + 1 tokens
                limit = min(limit, gen.call.max_tokens - gen.emitted - 1)
            if gen.call.speculative.n_max is not None:
                limit = min(limit, gen.call.speculative.n_max)
            limits.append(limit)

        def timed(gen, ask, limit):  # the drafter's time is its generation's
            start = time.perf_counter()
            try:
                return ask(limit)
            finally:
                gen.call.stats.draft_seconds += time.perf_counter() - start

        if len(decoding) == 1 and not decoding[0].call.speculative.p_min:
            drafts = [timed(decoding[0], decoding[0].drafter.propose, limits[0])]
        else:  # several slots sized together; or one whose request cuts its drafts by p_min
            offers = [timed(gen, gen.drafter.offer, limit) for gen, limit in zip(decoding, limits)]
            chances = [gen.call.speculative.cut(p) for gen, (_, p) in zip(decoding, offers)]
            lengths = self.size_drafts(chances, llm.drafter.policy.cost, llm.n_batch - reserve)
            drafts = [candidate.draft(n) for (candidate, _), n in zip(offers, lengths)]
        # a request's n_min drops its shorter drafts, as llama-server's does
        return [NO_DRAFT if len(d) < gen.call.speculative.n_min else d for gen, d in zip(decoding, drafts)]

    def _sample(self, gen: Generation, start: int):
        """sample(row): the generation's sampler chain on its row `row` (batch row start + row);
        at temperature > 0 also whether the sample was the most likely token."""
        ctx, sampler, llm = self.llm._ctx, gen.sampler, self.llm

        def sample(row: int):
            token = sampler.sample(ctx, start + row)  # y ~ p(· | prefix + draft[:row]); greedy: argmax
            if not gen.randomly:
                return token, None
            return token, token == int(np.argmax(llm._logits_row(start + row)))

        return sample

    def _stop(self, gen: Generation, n_past: int, start: int):
        """stop(prefix, row): llama_cpp's stopping criteria on the tokens up to position n_past,
        then the verified `prefix`, and the row's logits."""
        criteria, slot, llm = gen.stopping_criteria, gen.slot, self.llm
        if criteria is None:
            return None

        def stop(prefix, row: int) -> bool:
            ids = np.concatenate((slot.tokens[: n_past + 1], np.asarray(prefix, dtype=slot.tokens.dtype)))
            return bool(criteria(ids, llm._logits_row(start + row)))

        return stop

    def _accept(self, gen: Generation, draft: list[int], start: int, n_past: int, branch):
        """The acceptance rule on the generation's rows from batch row `start` on, timed as its
        sampling (what the host spends reading the rows)."""
        begin = time.perf_counter()
        try:
            return self.accept(draft, self._sample(gen, start), self._stop(gen, n_past, start), branch)
        finally:
            gen.call.stats.sample_seconds += time.perf_counter() - begin

    def _first_token(self, gen: Generation, row: int) -> None:
        """The first token comes from the prompt's last row, as in plain decoding: a step that
        drafts nothing is then plain's single-token decode."""
        verdict = self._accept(gen, [], row, gen.slot.n - 1, None)
        self._emit(gen, NO_DRAFT, NO_DRAFT, verdict, row)

    def _judge(self, gen: Generation, draft: Draft, start: int) -> int:
        """Verify the generation's rows and leave its sequence holding the pending token and the
        accepted part of the path taken (the draft, or its fork when the target took the branch);
        returns how many draft tokens were accepted."""
        slot, memory, branch = gen.slot, self.memory, draft.branch
        n_past = slot.n
        rolled_back = True
        try:
            verdict = self._accept(gen, draft.tokens.tolist(), start, n_past, branch)
            path = draft
            if verdict.branch_taken:
                path = draft.fork()
                fork = n_past + 1 + branch.at  # first position where the branches differ
                rolled_back = llama_cpp.llama_memory_seq_rm(memory, slot.seq, fork, -1)
                llama_cpp.llama_memory_seq_cp(memory, slot.branch_seq, slot.seq, fork, -1)
        finally:
            if branch is not None:
                rolled_back &= self._seq_rm(slot.branch_seq, 0)
        slot.tokens[n_past : n_past + 1 + len(path)] = [gen.pending, *path.tokens.tolist()]
        keep = n_past + 1 + verdict.accepted
        if keep < n_past + 1 + len(path):  # drop the rejected draft tokens
            rolled_back &= self._seq_rm(slot.seq, keep)
        if not rolled_back:
            self._evaluate_afresh(slot, keep)
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
            gen.drafter.extend(np.asarray(verdict.tokens, dtype=np.int32))
            gen.pending = verdict.tokens[-1]
            gen.emitted += len(verdict.tokens)
            gen.out.extend(verdict.tokens)
        if verdict.stopped:
            gen.done = True

    def _read_logprobs(self, gen: Generation, verdict, start: int) -> None:
        """Each emitted token's logprobs from the row that chose it, before the next decode
        overwrites the rows (host time reading rows, counted as sampling)."""
        begin = time.perf_counter()
        for token, row in zip(verdict.tokens, verdict.rows, strict=True):
            gen.call.logprobs.read(self.llm._logits_row(start + row), token)
        gen.call.stats.sample_seconds += time.perf_counter() - begin

    def _fail(self, gen: Generation, error: BaseException) -> None:
        """End one generation with `error`; its cells go back to what it had before the step."""
        self._seq_rm(gen.slot.seq, gen.slot.n)
        self._seq_rm(gen.slot.branch_seq, 0)
        gen.error, gen.done = error, True

    def _evaluate_afresh(self, slot: Slot, n: int) -> None:
        """The memory refused to drop rejected draft tokens: never go on with them in it. Warn,
        stop drafting on this model, and rebuild the sequence from its verified tokens[:n]."""
        warnings.warn("plookup: llama.cpp could not remove rejected draft tokens from the cache; "
                      "re-evaluating the verified tokens and decoding this model plainly from now on")
        self.llm.can_roll_back = False
        tokens = slot.tokens[:n].tolist()
        if not self._seq_rm(slot.seq, 0):
            self.llm._ctx.kv_cache_clear()  # llama_memory_clear: every kind of memory can do that
            for other in self.slots:
                other.n = 0
                if other.generation is not None and other is not slot:
                    self._fail(other.generation, RuntimeError("the cache was cleared under this generation"))
        slot.n = 0
        decode_chunks(self.llm, tokens, slot.seq, self.llm.n_batch)
        slot.n = len(tokens)

    def _room(self, slot: Slot) -> int:
        """Draft tokens that fit behind the slot's pending token so that prompt + output stays
        <= n_ctx, as llama_cpp caps it (the token sampled last is never evaluated); < 0: full."""
        return self.llm._n_ctx - slot.n - 2

    def _seq_rm(self, seq: int, p0: int) -> bool:
        """Drop sequence `seq`'s cells from position p0 on (no sequence: nothing to drop)."""
        return seq < 0 or bool(self.llm._ctx.kv_cache_seq_rm(seq, p0, -1))
