"""Admission and release: requests onto slots, and slots back, by whoever holds the context.

A request waits (:meth:`Admission.wait_for_slot`) until a free slot is handed to it: the one whose cells
share the longest prefix with its prompt, which is written into the slot's buffer then, the
generation's one copy of it (its drafter indexes it there). Its consumer takes its tokens
(:meth:`Admission.tokens`), stepping the engine whenever none is waiting, and gives it back when
done (:meth:`Admission.release`); the slot keeps the cells of what the consumer took. The turns
themselves (who holds the context, who waits) are :mod:`.turns`'.
"""

from __future__ import annotations

from typing import Callable, Iterator

import numpy as np

from ..verify.backend import BackendGreedy
from .reuse import Kept, apply_moves, reuse_plan, shift_plan, stage
from .slot import Generation, Slot
from .turns import Turns


class Admission(Turns):
    """The engine's admission and release over its `slots`, on `context` (a
    :class:`~plookup.engine.handle.ContextHandle`: roll-backs, the cells a prefix shift moves).
    `chains`: the backend greedy chains attached to the slots' sequences; `model`: the model's
    drafting side, read at each admission (its ``drafter``, which the slots' drafters are spawned
    from); `run_step()`: one step of the engine, made by a consumer waiting for tokens."""

    def __init__(self, context, slots: list[Slot], chains, model, run_step: Callable[[], None]):
        super().__init__()  # the context's lock and queues
        self.context, self.slots, self.chains, self.model, self.run_step = context, slots, chains, model, run_step
        # llama-server's --cache-reuse: the shortest cached chunk shifted into place for a request
        # that does not say (0: the common prefix only); where the memory can shift at all.
        self.cache_reuse = 0

    def active(self) -> int:
        return sum(slot.generation is not None for slot in self.slots)

    def wait_for_slot(self, prompt: list[int], call, sampler, randomly: bool, stopping_criteria) -> Generation:
        """Queue the request and wait for a slot: the free one whose cells share the longest prefix
        with `prompt` (editors resend the same file every turn). That prefix is kept, the rest is
        prefilled in the steps to come."""
        gen = Generation(None, call, None, sampler, randomly, stopping_criteria, len(prompt))
        with self._changed:
            self._waiting.append((gen, prompt))  # the prompt, until it is written into its slot
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
                gen, prompt = self._waiting.popleft()
            slot = max(free, key=lambda s: (s.shared_prefix(prompt), -s.index))
            gen.drafter = self._drafter(slot)
            try:
                if hasattr(gen.drafter, "use_memory"):  # the call's tenant's memory, else the drafter's
                    gen.drafter.use_memory(gen.call.memory)
                # before the buffer changes: what the drafter indexed there is kept where the prompt repeats it
                gen.drafter.bind(slot.tokens, prompt, gen.call.prediction)
                self._keep_prefix(slot, gen, prompt)
                slot.tokens[slot.n : len(prompt)] = prompt[slot.n :]  # its one copy (the kept cells hold the rest)
                gen.drafter.cover(len(prompt))
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
        its new tokens), spawned again only once the model's drafter or its settings changed.
        Slot 0's drafter starts over where another one indexed the buffer since (the user set
        another, then this one back) or llama_cpp's own code wrote it (:meth:`rewritten`): what
        its index covered there may be other tokens now."""
        model = self.model.drafter
        if slot.index == 0:
            if slot.drafter is not model:
                model.reset()
                slot.drafter = model
            return model
        # (a tuple compares the objects by identity, the numbers by value)
        made_from = (model, model.policy, getattr(model, "corpus", None), model.max_draft, model.branches)
        if slot.drafter is None or slot.drafter_made_from != made_from:
            slot.drafter, slot.drafter_made_from = model.spawn(), made_from
        return slot.drafter

    def _keep_prefix(self, slot: Slot, gen: Generation, prompt) -> None:
        """The cells `prompt` begins with kept (and cached chunks moved into place, or staged to
        be), the rest dropped: ``slot.tokens[:slot.n]`` is the prompt's head."""
        cached = slot.shared_prefix(prompt)
        min_chunk = self.cache_reuse if gen.call.cache_reuse is None else gen.call.cache_reuse
        self._check_kept(slot)
        if min_chunk > 0 and cached < len(prompt):  # cached chunks further on, shifted into place
            if not self.context.can_shift:
                raise ValueError(f"cache reuse (n_cache_reuse={min_chunk}) needs a memory that can shift its "
                                 f"cells, which this model's cannot: send n_cache_reuse 0")
            if slot.branch_seq >= 0:  # a spare sequence to stage chunks on: new tokens may come between them
                self._stage_chunks(slot, gen, prompt, cached, min_chunk)
            else:
                moves = shift_plan(slot.tokens[: slot.n].tolist(), prompt, cached, min_chunk)
                if moves:
                    cached = apply_moves(self.context, slot.seq, slot.tokens, moves)
                    gen.call.stats.shifted_tokens = sum(move.length for move in moves)
        elif min_chunk == 0:
            self._drop_kept(slot)
        # A whole cached prompt decodes its last token again: its logits are gone.
        reuse = cached - 1 if cached == len(prompt) else cached
        if not (reuse > 0 and self.context.roll_back(slot.seq, reuse)):
            reuse = 0
            if not self.context.roll_back(slot.seq, 0):
                raise RuntimeError(f"llama.cpp could not clear sequence {slot.seq} of the cache")
        if reuse != cached and gen.placements:  # (a refused roll-back) the chunks are evaluated instead
            self.context.roll_back(slot.branch_seq, 0)
            gen.placements, gen.call.stats.shifted_tokens = [], 0
        slot.n = reuse
        gen.call.stats.prefill_tokens = len(prompt) - reuse - sum(placement.length for placement in gen.placements)

    def _stage_chunks(self, slot: Slot, gen: Generation, prompt, cached: int, min_chunk: int) -> None:
        """Cached chunks of at least `min_chunk` tokens that `prompt` repeats after its first
        `cached` tokens, from the slot's cells and the ones it kept, staged for the step to bring
        in (:mod:`.reuse`); the prompt's last token is evaluated whatever is cached (its logits),
        a chunk that ends there counted whole against `min_chunk`, as llama-server counts it
        (llama.vim's text after the cursor, with its two markers, is a chunk of 256 at most).
        The slot's cells that are left, where they could serve a later prompt (`min_chunk` of
        them), are kept in their place on the kept sequence while they fit beside this request."""
        kept = slot.kept
        self.context.roll_back(slot.branch_seq, 0)  # (chunks an admission that failed staged)
        sources, seqs = [(slot.tokens[cached : slot.n], cached, None)], [slot.seq]
        if kept is not None:
            sources.append((kept.tokens, kept.first, kept.held))
            seqs.append(slot.kept_seq)
        takes = reuse_plan(sources, prompt, cached, len(prompt), min_chunk)
        if takes and takes[-1].to + takes[-1].length == len(prompt):  # as llama-server's walk, whose
            # last chunk may reach the prompt's end, and whose last token is then evaluated again
            takes[-1] = takes[-1]._replace(length=takes[-1].length - 1)
            takes = [take for take in takes if take.length > 0]
        gen.placements = stage(self.context, seqs, slot.branch_seq, takes)
        gen.call.stats.shifted_tokens = sum(take.length for take in takes)
        if slot.kept_seq < 0:
            return
        # what is left of each source once its chunks are staged
        left = np.ones(max(slot.n - cached, 0), bool)
        for take in takes:
            held = left if take.source == 0 else kept.held
            first = cached if take.source == 0 else kept.first
            held[take.at - first : take.at - first + take.length] = False
        fits = lambda count: (gen.call.max_tokens is not None and count >= min_chunk and  # noqa: E731
                              count + len(prompt) + gen.call.max_tokens + self.context.n_batch <= self.context.n_ctx)
        if fits(int(left.sum())):  # the slot's own leftovers replace the older ones
            self._drop_kept(slot)
            self.context.copy(slot.seq, slot.kept_seq, cached, -1)  # (the roll-back below takes them off the slot's)
            slot.kept = Kept(cached, slot.tokens[cached : slot.n].copy(), left)
        elif kept is not None and not fits(kept.count):
            self._drop_kept(slot)
        if slot.kept is not None or takes:
            gen.shared = True  # its cache holds, or its prompt was given, cells of other sequences

    def _check_kept(self, slot: Slot) -> None:
        """Forget kept cells the memory no longer holds as recorded (llama_cpp's eval drops every
        sequence's cells past its tokens), and drop the cells of ones forgotten (:meth:`rewritten`)."""
        kept = slot.kept
        if kept is None:
            self._drop_kept(slot)
            return
        where = np.flatnonzero(kept.held)
        span = (kept.first + where[0], kept.first + where[-1]) if where.size else (-1, -1)
        if self.context.span(slot.kept_seq) != span:
            self._drop_kept(slot)

    def _drop_kept(self, slot: Slot) -> None:
        if slot.kept_seq >= 0:
            self.context.roll_back(slot.kept_seq, 0)
        slot.kept = None

    def release(self, gen: Generation) -> None:
        """The consumer is done. Its generation ends now; its slot is taken back by whoever holds
        the context next (now, if it is free: a finalizer inside a step cannot have it)."""
        gen.done = True
        slot = gen.slot
        if slot is not None and slot.generation is gen:  # still its own: its cells are this generation's
            # what the cache holds of what its consumer took, as _take_back keeps it: a token a
            # stopping criterion fired on inside a verified draft is there, for llama_cpp's
            # after-loop check to find, as in llama_cpp's own loop, which evaluates it first
            gen.history = slot.tokens[: min(gen.prompt_length + gen.taken, slot.n)].copy()
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
                keep = min(gen.prompt_length + gen.taken, slot.n)
                if not self.context.roll_back(slot.seq, keep):  # unconditional: a failed decode may leave cells
                    self.context.roll_back(slot.seq, 0)
                    keep = 0
                slot.n = keep
                self.context.roll_back(slot.branch_seq, 0)
                slot.cells.logits_gone()  # the context's logits belong to a verify batch (slot 0: the model's)
                gen.drafter.finish()  # e.g. remember this request in a cross-request memory
            finally:
                if gen.shared and gen.call.stats.exact:
                    gen.call.stats.exact = False
                slot.generation = None

    def forget(self) -> None:
        """Drop the cells of every idle slot, and the drafts' past outcomes (a benchmark's runs
        then each prefill and calibrate afresh)."""

        def drop():
            for slot in self.slots:
                if slot.generation is None and self.context.roll_back(slot.seq, 0):
                    slot.n = 0
                self._drop_kept(slot)

        self._wait_for(drop)
        policy = getattr(self.model.drafter, "policy", None)
        if policy is not None:
            policy.past.clear()

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

    def _own_context(self) -> None:
        """For llama_cpp's own plain decoding on sequence 0 (:meth:`exclusive`): no backend chain,
        the other slots' cells emptied, and slot 0's buffer llama_cpp's to write."""
        self.chains.detach()  # llama_cpp's loop reads sequence 0's logits
        for slot in self.slots[1:]:
            self.context.roll_back(slot.seq, 0)
            slot.n = 0
        for slot in self.slots:
            self._drop_kept(slot)
        self.rewritten()

    def rewritten(self) -> None:
        """llama_cpp's own code writes slot 0's buffer (the model's ``input_ids``: its ``eval``,
        its plain loop, ``load_state``): the drafter that indexed it starts over at its next
        generation, and the cells it kept are dropped then (a state loaded replaces them)."""
        self.slots[0].drafter = None
        self.slots[0].kept = None

    # -- consuming

    def tokens(self, gen: Generation) -> Iterator[int]:
        """The generation's tokens as its consumer takes them; stepping the engine whenever none
        is waiting and no other thread is stepping. Raises the generation's error after the
        tokens emitted before it."""
        try:
            while True:
                if not gen.out:
                    self._wait(lambda: bool(gen.out) or gen.done, self.run_step)
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
