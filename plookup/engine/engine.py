"""The engine: one llama_context, N slots, one ``llama_decode`` per step for every generation.

Its parts, one job each: whose turn it is on the context (:mod:`.turns`), requests onto slots and
back (:mod:`.admission`), the step that advances them all (:mod:`.step`), each generation's verdict
on its rows (:mod:`.verdicts`); here, what they share: the slots, the context's memory and the one
roll-back of a sequence (:meth:`Engine._roll_back`).

Exactness: a generation that never shared a step or the cache with another sequence is decoded
as a lone stream is. One that did is claimed exact only where ``shared_exact`` says the layout
keeps a slot's rows its lone decode (a KV stream per slot, measured by
:func:`plookup.measure.exactness.probe_slots`); elsewhere its ``stats.exact`` becomes False, since in a
unified cache its cells interleave with the others' and its rows round differently.
"""

from __future__ import annotations

import warnings
from typing import Optional

import llama_cpp

from ..verify.accept import accept
from ..verify.backend import Chains
from ..verify.rows import decode_chunks
from .admission import Admission
from .slot import Generation, Slot
from .step import Step, StepRecord
from .turns import Turns
from .verdicts import Verdicts

__all__ = ["Engine", "StepRecord"]


class Engine(Admission, Step, Verdicts):
    """The slots of one ``plookup.Llama`` and the step that advances them all."""

    def __init__(self, llm, n_slots: int, branch_sequences: bool = True, shared_exact: bool = False,
                 streams: bool = False):
        """`branch_sequences`: the context has a second sequence per slot for a draft's branch
        (without, drafts must carry none). `shared_exact`: a slot's rows beside other slots' are
        bitwise its lone decode here (measured: :func:`plookup.measure.exactness.probe_slots`).
        `streams`: each slot's sequence has a KV stream of its own (see :mod:`plookup.draft.sizing`)."""
        Turns.__init__(self)  # the context's lock and queues
        self.llm = llm
        size = len(llm.input_ids)
        # Slot i decodes on sequence i and verifies a draft's second branch on sequence n_slots + i.
        branch = (lambda i: n_slots + i) if branch_sequences else (lambda i: -1)
        self.slots = [Slot(0, 0, branch(0), model=llm)]
        self.slots += [Slot(i, i, branch(i), size=size) for i in range(1, n_slots)]
        self.shared_exact = shared_exact
        self.streams = streams  # which step cost sizes several slots' drafts (plookup.draft.sizing)
        self.accept = accept  # the acceptance rule (a pure function, plookup.verify.accept)
        self.steps = 0  # decodes made, and their rows: what /metrics reports
        self.rows = 0
        self.trace: Optional[list[StepRecord]] = None  # a list: every step appends its record
        # Backend greedy chains on the slots whose latest generation sampled with them (attaching
        # or detaching costs a graph reserve: see plookup.verify.backend).
        self.chains = Chains(llm._ctx)
        # llama-server's --cache-reuse: the shortest cached chunk shifted into place for a request
        # that does not say (0: the common prefix only); where the memory can shift at all.
        self.cache_reuse = 0
        self.can_shift = bool(llama_cpp.llama_memory_can_shift(self.memory))

    @property
    def memory(self):
        return self.llm._ctx.memory

    def _room(self, slot: Slot) -> int:
        """Draft tokens that fit behind the slot's pending token so that prompt + output stays
        <= n_ctx, as llama_cpp caps it (the token sampled last is never evaluated); < 0: full."""
        return self.llm._n_ctx - slot.n - 2

    # -- dropping cells

    def _roll_back(self, seq: int, n: int) -> bool:
        """Roll sequence `seq` back to its first `n` cells: drop its cells from position n on (no
        sequence: nothing to drop). False where the memory refused."""
        return seq < 0 or bool(self.llm._ctx.kv_cache_seq_rm(seq, n, -1))

    def _fail(self, gen: Generation, error: BaseException) -> None:
        """End one generation with `error`; its cells go back to what it had before the step."""
        self._roll_back(gen.slot.seq, gen.slot.n)
        self._roll_back(gen.slot.branch_seq, 0)
        gen.error, gen.done = error, True

    def _evaluate_afresh(self, slot: Slot, n: int) -> None:
        """The memory refused to drop rejected draft tokens: never go on with them in it. Warn,
        stop drafting on this model, and rebuild the sequence from its verified tokens[:n]."""
        warnings.warn("plookup: llama.cpp could not remove rejected draft tokens from the cache; "
                      "re-evaluating the verified tokens and decoding this model plainly from now on")
        self.llm.can_roll_back = False
        tokens = slot.tokens[:n].tolist()
        if not self._roll_back(slot.seq, 0):
            self.llm._ctx.kv_cache_clear()  # llama_memory_clear: every kind of memory can do that
            for other in self.slots:
                other.n = 0
                if other.generation is not None and other is not slot:
                    self._fail(other.generation, RuntimeError("the cache was cleared under this generation"))
        slot.n = 0
        decode_chunks(self.llm, tokens, slot.seq, self.llm.n_batch)
        slot.n = len(tokens)
