"""One step of every generation, read top to bottom in :meth:`Step.run`: gather the generations
that want tokens; draft for the decoding ones; their rows (the pending token and the draft), then
the prefilling ones' prompt chunks in the rows left; one ``llama_decode``; each decoding one's
verdict (:mod:`.verdicts`: accepted tokens out, rejected ones rolled back); the chunks taken in.

Rows: a decoding generation's pending token and draft (:func:`plookup.verify.rows.verify_rows`, on
its own sequence, logits at each), a prefilling one's next chunk of prompt, read from its slot's
buffer (logits at the chunk's last row only, as llama_cpp's ``eval`` asks; a chunk decoded only
advances the slot's cells, and after the prompt's last one gives its first token). The tokens a
generation emits wait in its ``out`` queue for its consumer.

Drafts: a lone decoding generation drafts with its policy as a single stream does (a second branch
included where the context has branch sequences); several are sized together for the step's cost
(:func:`plookup.draft.sizing.size_batch`, or :func:`~plookup.draft.sizing.size_streams` where every slot has a KV
stream of its own, as it has with several slots): a busy batch drafts less, a full one nothing.

The rows go in the order of their sequences, each generation's together: with a KV stream per
slot llama.cpp splits a step into ubatches of consecutive sequences only, so an idle slot between
two stepped ones, or beside them, gets a throwaway row where that makes the step's passes over the
weights cheaper (:meth:`Step._fillers`); the drafts are sized with those rows in the step.

The step is a part of the engine that calls llama.cpp only through its context handle
(:class:`~plookup.engine.handle.ContextHandle`) and judges through a
:class:`~plookup.engine.verdicts.Verdicts`: both can be fakes (tests/unit/test_engine_parts.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, NamedTuple, Optional

from ..draft.sizing import draft_limit, fillers_worth_adding, room, size_batch, size_streams
from ..draft.values import NO_DRAFT, Draft
from ..verify.rows import last_row_logits, sequence_rows, verify_rows
from .reuse import place_due
from .slot import Generation, Slot
from .verdicts import fail

# Tokens a generation may be stepped ahead of its consumer by the other consumers' steps: enough
# that a consumer busy with its last tokens does not drop out of the next batch, few enough that a
# client that has stopped reading does not make the others verify tokens nobody takes.
AHEAD = 48


class Piece(NamedTuple):
    """One slot's rows in a step's batch, together."""

    slot: Any  # the Slot whose sequence they are on: a stepped generation's, or an idle one's (a gap filler)
    rows: list  # (token, position, sequences) each
    logits: list[bool]  # per row: its logits are read


@dataclass(frozen=True)
class StepRecord:
    """What one step did and where its time went (``Step.trace``; ``plookup bench --trace``)."""

    began: float  # time.perf_counter() at the step's start
    host_before: float  # seconds: drafting, the batch's rows
    decode: float  # seconds inside llama_decode
    host_after: float  # seconds: each generation's verdict, prompt chunks taken in
    rows: int
    drafted: list[int]  # each decoding generation's draft length
    accepted: list[int]  # ... and how many of it were accepted
    prefilled: int  # prompt tokens of prefilling generations in the step


class Step:
    """The engine's step over its `slots`, on `context` (a
    :class:`~plookup.engine.handle.ContextHandle`), judged by `verdicts`. `model`: the model's
    drafting side, read at each step (``drafter``, whose policy's cost curve sizes the drafts, and
    ``can_roll_back``: no drafts where it is off). `streams`: a KV stream per slot (how a batch is
    split, see :mod:`plookup.draft.sizing`); `shared_exact`: a slot's rows beside others' are its
    lone decode (see :meth:`_note_shared`)."""

    def __init__(self, context, slots: list[Slot], verdicts, model, streams: bool = False,
                 shared_exact: bool = False):
        self.context, self.slots, self.verdicts, self.model = context, slots, verdicts, model
        self.streams, self.shared_exact = streams, shared_exact
        self.steps = 0  # decodes made, and their rows: what /metrics reports
        self.rows = 0
        self.trace: Optional[list[StepRecord]] = None  # a list: every step appends its record

    def run(self) -> None:
        """One step: every generation that wants tokens, in one decode."""
        # who steps (one cancelled, or whose context is full, ends here)
        decoding, prefilling = self._gather()
        if not decoding and not prefilling:
            return
        for gen in prefilling:  # cached chunks whose prompt tokens before them are in
            place_due(self.context, gen.slot, gen.placements)
        began = time.perf_counter()
        n_batch = self.context.n_batch
        # the drafts, sized for the step's cost with its other rows (idle slots' throwaway rows included)
        fillers = self._fillers(decoding + prefilling) if self.streams else []
        drafts = self._drafts(decoding, prefilling, fillers)
        # the rows: each draft behind its pending token, then prompt chunks in the rows left
        verifying = [self._draft_rows(gen, draft) for gen, draft in zip(decoding, drafts)]
        chunks = self._chunk_rows(prefilling, n_batch - sum(len(piece.rows) for piece in verifying))
        stepped = decoding + prefilling[: len(chunks)]  # (the prompt chunks go first come first)
        if sum(len(piece.rows) for piece in verifying + chunks) + len(fillers) > n_batch:
            fillers = []  # a full batch is a prompt chunk's: a pass more or less is little beside it
        rows, logits, starts = batch(verifying + chunks + fillers)
        self._note_shared(stepped)
        # one decode; the fillers' rows leave the cache whatever it did
        self.context.fill(rows, logits)
        decoding_began = time.perf_counter()
        try:
            if not self._decode(stepped, len(rows)):
                return
        finally:
            for filler in fillers:
                self.context.roll_back(filler.slot.seq, filler.slot.n)
        decoded = time.perf_counter()
        # the verdicts: accepted tokens out, rejected ones rolled back; then the prompt chunks in
        accepted = [self.verdicts.verdict(gen, draft, start) for gen, draft, start in zip(decoding, drafts, starts)]
        for gen, chunk, start in zip(prefilling, chunks, starts[len(verifying):]):
            self._take_chunk(gen, start, len(chunk.rows))
        if self.trace is not None:
            self.trace.append(StepRecord(began, decoding_began - began, decoded - decoding_began,
                                         time.perf_counter() - decoded, len(rows), [len(d) for d in drafts],
                                         accepted, sum(len(chunk.rows) for chunk in chunks)))

    def room(self, slot: Slot) -> int:
        """Draft tokens that fit behind the slot's pending token (:func:`plookup.draft.sizing.room`); < 0: full."""
        return room(self.context.n_ctx, slot.n)

    # -- who steps

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
        return not self.context.is_eog(gen.out[-1])

    def _gather(self) -> tuple[list[Generation], list[Generation]]:
        """The generations this step advances: (decoding, prefilling). One cancelled, or whose
        context is full, ends here instead."""
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
            elif self.room(slot) < 0:
                gen.done = True  # context full: the caller reports finish_reason "length"
            else:
                decoding.append(gen)
        return decoding, prefilling

    # -- the drafts

    def _fillers(self, stepping: list[Generation]) -> list[Piece]:
        """With a KV stream per slot, llama.cpp passes over the weights once per run of consecutive
        stepped sequences, and the curve may make a longer run cheaper than a shorter one: an idle
        slot where a row makes the step's passes cheaper (between two runs, or beside one:
        :func:`plookup.draft.sizing.fillers_worth_adding`) gets a throwaway row behind its cells,
        dropped after the decode. A slot whose context is full takes none, and a lone generation
        none (one row is the cheapest pass; a curve saying otherwise is noise, and a row beside it
        would make its step a shared one unnoted: see :meth:`_note_shared`)."""
        busy = {gen.slot.seq for gen in stepping}
        if len(busy) < 2:
            return []
        idle = {slot.seq: slot for slot in self.slots if slot.seq not in busy and self.room(slot) >= 0}
        fillers = []
        for seq in fillers_worth_adding(sorted(busy), sorted(idle), self.model.drafter.policy.cost):
            slot = idle[seq]
            token = int(slot.tokens[slot.n - 1]) if slot.n > 0 else 0
            fillers.append(Piece(slot, sequence_rows([token], slot.n, slot.seq), [False]))
        return fillers

    def _drafts(self, decoding: list[Generation], prefilling: list[Generation], fillers: list[Piece]) -> list[Draft]:
        """Each decoding generation's draft; a row each stays free for the prefilling ones' chunks,
        and the fillers' rows are the step's too."""
        model, n_batch = self.model, self.context.n_batch
        if not decoding or not model.can_roll_back:
            return [NO_DRAFT] * len(decoding)
        reserve = len(prefilling) + len(fillers)
        limits = [self._draft_limit(gen, len(decoding), reserve) for gen in decoding]

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
            cost = model.drafter.policy.cost
            if self.streams:  # the step's other rows, each one row, where the split puts them
                fixed = [gen.slot.seq for gen in prefilling] + [piece.slot.seq for piece in fillers]
                lengths = size_streams(chances, cost, n_batch, [gen.slot.seq for gen in decoding], fixed)
            else:
                lengths = size_batch(chances, cost, n_batch - reserve)
            drafts = [candidate.draft(n) for (candidate, _), n in zip(offers, lengths)]
        # a request's n_min drops its shorter drafts, as llama-server's does
        return [NO_DRAFT if len(d) < gen.call.speculative.n_min else d for gen, d in zip(decoding, drafts)]

    def _draft_limit(self, gen: Generation, n_decoding: int, reserve: int) -> int:
        """The longest draft the generation may verify (:func:`plookup.draft.sizing.draft_limit`)."""
        left = None if gen.call.max_tokens is None else gen.call.max_tokens - gen.emitted
        return draft_limit(self.room(gen.slot), self.context.n_batch, n_decoding, reserve, left,
                           gen.call.speculative.n_max)

    # -- the rows

    def _draft_rows(self, gen: Generation, draft: Draft) -> Piece:
        """The generation's pending token and draft as rows, with logits at each."""
        slot = gen.slot
        new = verify_rows(gen.pending, draft.tokens, draft.branch, slot.n, (slot.seq, slot.branch_seq))
        if draft.branch is not None:
            assert slot.branch_seq >= 0, "a draft with a branch on a context without branch sequences"
            self.context.copy(slot.seq, slot.branch_seq)  # the branches share the whole prefix
        return Piece(slot, new, [True] * len(new))

    def _chunk_rows(self, prefilling: list[Generation], budget: int) -> list[Piece]:
        """Prompt chunks in the `budget` rows the batch has left, first come first, with logits
        at each chunk's last row (a call's ``last_token_alone``: the last prompt token's chunk is
        that token alone)."""
        chunks = []
        for gen in prefilling:
            if budget <= 0:
                break
            slot = gen.slot
            end = gen.prompt_length
            if gen.call.last_token_alone and slot.n < end - 1:
                end -= 1  # the last token in a pass of its own, as a repeat that found the rest cached
            if gen.placements:
                end = min(end, gen.placements[0].to)  # a cached chunk comes next (:mod:`.reuse`)
            chunk = slot.tokens[slot.n : min(slot.n + budget, end)].tolist()
            chunks.append(Piece(slot, sequence_rows(chunk, slot.n, slot.seq), last_row_logits(len(chunk))))
            budget -= len(chunk)
        return chunks

    def _note_shared(self, stepped: list[Generation]) -> None:
        """Generations that share a step, or the cache, with another sequence are no lone decode:
        no exactness claim, unless the layout keeps their rows so (``shared_exact``)."""
        others = [s for s in self.slots if s.n > 0 and s.generation not in stepped]
        if not self.shared_exact and (len(stepped) > 1 or others):
            for gen in stepped:
                gen.shared = True

    # -- one decode

    def _decode(self, stepped: list[Generation], n_rows: int) -> bool:
        """The step's one llama_decode; False when it failed, and with it every generation in it."""
        try:
            self.context.decode()
        except Exception as e:  # the whole batch failed: so did every generation in it
            for gen in stepped:
                fail(self.context, gen, e)
            return False
        finally:
            self.steps += 1
            self.rows += n_rows
        return True

    # -- prompt chunks in

    def _take_chunk(self, gen: Generation, start: int, n: int) -> None:
        """A prompt chunk of `n` tokens is in the cells (its tokens already in the buffer); after
        the prompt's last one, its first token."""
        slot = gen.slot
        slot.n += n
        if slot.n == gen.prompt_length:
            try:
                self.verdicts.first_token(gen, start + n - 1)
            except Exception as e:
                fail(self.context, gen, e)


def batch(pieces: list[Piece]) -> tuple[list, list[bool], list[int]]:
    """The step's rows and logits flags, each piece's rows together and the pieces in the order
    of their sequences (llama.cpp's split into ubatches takes consecutive sequences in the order it
    meets them); and each piece's first row, in the pieces' order."""
    order = sorted(range(len(pieces)), key=lambda i: pieces[i].rows[0][2][0])  # its first row's sequence
    rows: list = []
    logits: list[bool] = []
    starts = [0] * len(pieces)
    for i in order:
        starts[i] = len(rows)
        rows += pieces[i].rows
        logits += pieces[i].logits
    return rows, logits, starts
