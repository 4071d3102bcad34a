"""The engine: one llama_context, N slots, one ``llama_decode`` per step for every generation.

It is composed of parts, one job each, each testable alone (tests/unit/test_engine_parts.py): the
context handle, the one place that calls llama.cpp (:class:`~.handle.ContextHandle`, its
``roll_back`` the one roll-back of a sequence); the step that advances every generation
(:class:`~.step.Step`, ``engine.step``: the one place that counts its decodes and rows, keeps
its trace and knows whether shared steps are exact); each generation's verdict on its rows
(:class:`~.verdicts.Verdicts`). The engine is itself the third part, requests onto slots and
back, taking turns on the context (:class:`~.admission.Admission` over :class:`~.turns.Turns`):
what ``plookup.Llama`` calls is Admission's. Here: the slots the parts share, the parts wired over
them, and what only the whole engine can do (:meth:`Engine.evaluate_afresh`).

Exactness: a generation that never shared a step or the cache with another sequence is decoded
as a lone stream is. One that did is claimed exact only where the step's ``shared_exact`` says
the layout keeps a slot's rows its lone decode (a KV stream per slot, measured by
:func:`plookup.measure.exactness.probe_slots`); elsewhere its ``stats.exact`` becomes False, since
in a unified cache its cells interleave with the others' and its rows round differently.
"""

from __future__ import annotations

import warnings

from ..verify.accept import accept
from .admission import Admission
from .handle import ContextHandle
from .slot import Cells, Slot
from .step import Step, StepRecord
from .verdicts import Verdicts, fail

__all__ = ["Engine", "StepRecord"]


class Engine(Admission):
    """The slots of one ``plookup.Llama`` and the step that advances them all. What
    ``plookup.Llama`` calls (wait_for_slot, tokens, exclusive, forget, rewritten, active,
    cache_reuse) is the engine's admission, which the engine is: :class:`~.admission.Admission`."""

    def __init__(self, context: ContextHandle, cells, model, n_slots: int, branch_sequences: bool = True,
                 shared_exact: bool = False, streams: bool = False, kept_sequence: bool = False):
        """`context`: the handle on the llama_context. `cells`: slot 0's tokens and count (the
        model's own, :class:`plookup.api.context.ModelCells`; the other slots own theirs, as long).
        `model`: the model's drafting side, ``drafter`` and ``can_roll_back``: a reference, not a
        copy, since both change under the engine (a user may set another drafter, and the engine
        turns ``can_roll_back`` off where the memory refuses a roll-back, which the model's own
        ``generate`` reads too). `branch_sequences`: the context has a second sequence per slot for
        a draft's branch (without, drafts must carry none). `shared_exact`: a slot's rows beside
        other slots' are bitwise its lone decode here (measured:
        :func:`plookup.measure.exactness.probe_slots`). `streams`: each slot's sequence has a KV
        stream of its own (see :mod:`plookup.draft.sizing`). `kept_sequence`: the context has a
        sequence after the branches' for the cells a lone slot keeps from an earlier prompt
        (:mod:`.reuse`)."""
        size = len(cells.tokens)
        # Slot i decodes on sequence i and verifies a draft's second branch on sequence n_slots + i.
        branch = (lambda i: n_slots + i) if branch_sequences else (lambda i: -1)
        slots = [Slot(0, 0, branch(0), cells, 2 * n_slots if kept_sequence and n_slots == 1 else -1)]
        slots += [Slot(i, i, branch(i), Cells(size)) for i in range(1, n_slots)]
        self.verdicts = Verdicts(context, accept, self.evaluate_afresh)
        self.step = Step(context, slots, self.verdicts, model, streams, shared_exact)
        # Backend greedy chains on the slots whose latest generation sampled with them (attaching
        # or detaching costs a graph reserve: see plookup.verify.backend).
        super().__init__(context, slots, context.backend_chains(), model, self.step.run)

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
