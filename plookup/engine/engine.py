"""The engine: one llama_context, N slots, one ``llama_decode`` per step for every generation.

It is composed of parts, one job each, that it owns and wires together, each testable alone
(tests/unit/test_engine_parts.py): the context handle, the one place that calls llama.cpp
(:class:`~.handle.ContextHandle`, its ``roll_back`` the one roll-back of a sequence); requests onto
slots and back, taking turns on the context (:class:`~.admission.Admission` over
:class:`~.turns.Turns`); the step that advances them all (:class:`~.step.Step`); each generation's
verdict on its rows (:class:`~.verdicts.Verdicts`). Here: the slots they share, what only the whole
engine can do (:meth:`Engine.evaluate_afresh`), and the engine's surface for ``plookup.Llama``.

Exactness: a generation that never shared a step or the cache with another sequence is decoded
as a lone stream is. One that did is claimed exact only where ``shared_exact`` says the layout
keeps a slot's rows its lone decode (a KV stream per slot, measured by
:func:`plookup.measure.exactness.probe_slots`); elsewhere its ``stats.exact`` becomes False, since in a
unified cache its cells interleave with the others' and its rows round differently.
"""

from __future__ import annotations

import warnings
from typing import ContextManager, Iterator

from ..verify.accept import accept
from .admission import Admission
from .handle import ContextHandle
from .slot import Cells, Generation, Slot, attribute_of
from .step import Step, StepRecord
from .verdicts import Verdicts, fail

__all__ = ["Engine", "StepRecord"]


class Engine:
    """The slots of one ``plookup.Llama`` and the step that advances them all."""

    def __init__(self, context: ContextHandle, cells, model, n_slots: int, branch_sequences: bool = True,
                 shared_exact: bool = False, streams: bool = False):
        """`context`: the handle on the llama_context. `cells`: slot 0's tokens and count (the
        model's own, :class:`plookup.api.context.ModelCells`; the other slots own theirs, as long).
        `model`: the model's drafting side, ``drafter`` and ``can_roll_back``: a reference, not a
        copy, since both change under the engine (a user may set another drafter, and the engine
        turns ``can_roll_back`` off where the memory refuses a roll-back, which the model's own
        ``generate`` reads too). `branch_sequences`: the context has a second sequence per slot for
        a draft's branch (without, drafts must carry none). `shared_exact`: a slot's rows beside
        other slots' are bitwise its lone decode here (measured:
        :func:`plookup.measure.exactness.probe_slots`). `streams`: each slot's sequence has a KV
        stream of its own (see :mod:`plookup.draft.sizing`)."""
        self.context, self.model = context, model
        size = len(cells.tokens)
        # Slot i decodes on sequence i and verifies a draft's second branch on sequence n_slots + i.
        branch = (lambda i: n_slots + i) if branch_sequences else (lambda i: -1)
        self.slots = [Slot(0, 0, branch(0), cells)]
        self.slots += [Slot(i, i, branch(i), Cells(size)) for i in range(1, n_slots)]
        # Backend greedy chains on the slots whose latest generation sampled with them (attaching
        # or detaching costs a graph reserve: see plookup.verify.backend).
        self.chains = context.backend_chains()
        self.verdicts = Verdicts(context, accept, self.evaluate_afresh)
        self.step = Step(context, self.slots, self.verdicts, model, streams, shared_exact)
        self.admission = Admission(context, self.slots, self.chains, model, self.step.run)

    # -- what plookup.Llama calls, each the admission's (see there)

    def wait_for_slot(self, prompt: list[int], call, sampler, randomly: bool, stopping_criteria) -> Generation:
        return self.admission.wait_for_slot(prompt, call, sampler, randomly, stopping_criteria)

    def tokens(self, gen: Generation) -> Iterator[int]:
        return self.admission.tokens(gen)

    def exclusive(self) -> ContextManager[None]:
        return self.admission.exclusive()

    def forget(self) -> None:
        self.admission.forget()

    def rewritten(self) -> None:
        self.admission.rewritten()

    def active(self) -> int:
        return self.admission.active()

    accept = attribute_of("verdicts", "accept", "The acceptance rule (a pure function, plookup.verify.accept).")
    trace = attribute_of("step", "trace", "None, or a list every step appends its StepRecord to.")
    steps = attribute_of("step", "steps", "Decodes made (what /metrics reports).")
    rows = attribute_of("step", "rows", "... and their rows.")
    shared_exact = attribute_of("step", "shared_exact", "A slot's rows beside other slots' are its lone decode here.")
    cache_reuse = attribute_of("admission", "cache_reuse", "llama-server's --cache-reuse where a request does not say.")

    @property
    def memory(self):
        return self.context.memory

    def evaluate_afresh(self, slot: Slot, n: int) -> None:
        """The memory refused to drop rejected draft tokens: never go on with them in it. Warn,
        stop drafting on this model, and rebuild the sequence from its verified tokens[:n]."""
        warnings.warn("plookup: llama.cpp could not remove rejected draft tokens from the cache; "
                      "re-evaluating the verified tokens and decoding this model plainly from now on")
        self.model.can_roll_back = False
        tokens = slot.tokens[:n].tolist()
        if not self.context.roll_back(slot.seq, 0):
            self.context.clear()
            for other in self.slots:
                other.n = 0
                if other.generation is not None and other is not slot:
                    fail(self.context, other.generation, RuntimeError("the cache was cleared under this generation"))
        slot.n = 0
        self.context.prefill(tokens, slot.seq)
        slot.n = len(tokens)
