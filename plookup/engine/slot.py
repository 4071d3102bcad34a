"""A slot: one sequence of the engine's context, and the generation running on it.

A :class:`Slot` is a sequence id (and a second one for a draft's branch) with its token buffer,
kept by its :class:`Cells`: the one copy of its generation's history. Its KV cells hold
``tokens[:n]``; while a generation decodes, its pending token (emitted, not yet in the cache) is
``tokens[n]``. The prompt is written there once, at admission, and each verdict writes the tokens
it emits at their positions (:mod:`.admission`, :mod:`.verdicts`); nothing else is written there,
rejected draft tokens included. The slot's drafter reads the same buffer for its index
(:meth:`plookup.draft.index_drafter.IndexDrafter.bind`). Slot 0's cells are handed in by the API
(:class:`plookup.api.context.ModelCells`: the model's own ``input_ids`` / ``n_tokens``), so that
llama_cpp's methods on the model (``eval``, ``reset``, ``save_state``) keep reading sequence 0 as
they always have; the other slots own theirs. A slot keeps its cells after a generation, so the
next request whose prompt shares a prefix with them does not prefill it again.

A :class:`Generation` is one request on a slot: its call, drafter, sampler and stopping criteria,
its prompt's length (the prompt itself is the buffer's), and the tokens emitted but not yet taken
by its consumer.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Optional

import numpy as np


def attribute_of(part: str, name: str, doc: str = "") -> property:
    """An attribute that is the one of the object in attribute `part` (read and written there)."""
    return property(lambda self: getattr(getattr(self, part), name),
                    lambda self, value: setattr(getattr(self, part), name, value), doc=doc)


class Cells:
    """A sequence's tokens as its KV cells hold them, ``tokens[:n]``: a slot's own. Slot 0's are
    the model's, with the same three members (:class:`plookup.api.context.ModelCells`)."""

    def __init__(self, size: int):
        self.tokens = np.zeros(size, dtype=np.intc)
        self.n = 0

    def logits_gone(self) -> None:
        """The context's newest logits are no longer this sequence's last row's (a verify batch's,
        another sequence's): nothing reads a slot's own cells' logits, so nothing to tell."""


class Slot:
    def __init__(self, index: int, seq: int, branch_seq: int, cells, kept_seq: int = -1):
        self.index, self.seq, self.branch_seq = index, seq, branch_seq
        self.cells = cells  # a Cells, or slot 0's ModelCells
        # A sequence for cells kept from an earlier prompt (-1: none), and what it holds
        # (plookup.engine.reuse.Kept; None: nothing).
        self.kept_seq, self.kept = kept_seq, None
        self.generation: Optional[Generation] = None  # the request running here, if any
        # The drafter whose index reads this slot's buffer (Admission._drafter): slot 0's, the
        # model's that last drafted here, None once llama_cpp's own code wrote the buffer; the
        # others', one spawned from the model's, and what it was spawned from.
        self.drafter, self.drafter_made_from = None, None

    tokens = attribute_of("cells", "tokens")
    n = attribute_of("cells", "n", "How many of ``tokens`` the sequence's KV cells hold.")

    def shared_prefix(self, prompt) -> int:
        """How many leading tokens of `prompt` the slot's cells already hold."""
        n = min(self.n, len(prompt))
        if n == 0:
            return 0
        differ = np.flatnonzero(self.tokens[:n] != np.asarray(prompt[:n], dtype=self.tokens.dtype))
        return int(differ[0]) if differ.size else n


@dataclass(eq=False)
class Generation:
    """One request's state on its slot, written under the engine's context, except by its
    consumer: ``out`` (a deque it pops from, thread-safe), ``taken`` and ``done`` (release)."""

    slot: Optional[Slot]  # None until the engine hands it one
    call: object  # plookup.api.call.Call
    drafter: object  # an IndexDrafter, this generation's only (chosen with the slot)
    sampler: object  # sample(ctx, row): plookup.verify.greedy.GreedyRows, or llama_cpp's LlamaSampler chain
    randomly: bool  # temperature != 0: the policy learns how often samples are the argmax
    stopping_criteria: object
    prompt_length: int  # its first tokens in the slot's buffer
    out: deque = field(default_factory=deque)  # emitted, not yet taken by the consumer
    emitted: int = 0
    taken: int = 0
    done: bool = False
    error: Optional[BaseException] = None
    # It shared a step, or the cache, with another sequence: not a lone decode, so no exactness claim.
    shared: bool = False
    # Its tokens once its consumer was done: what llama_cpp's completion code reads as
    # ``_input_ids`` after its loop, when the slot may already be another request's.
    history: Optional[np.ndarray] = None
    # Cached chunks waiting on the slot's branch sequence for the prompt tokens before them
    # (plookup.engine.reuse.Placement each, in prompt order; the step brings each in).
    placements: list = field(default_factory=list)

    @property
    def prefilling(self) -> bool:
        """Its prompt is not all in the cells yet (each prompt decodes its last token at least:
        from then on, n is past the prompt's end)."""
        return self.slot.n < self.prompt_length

    @property
    def pending(self) -> int:
        """The newest emitted token, not yet in the cache (while decoding): the buffer's after the
        cells."""
        return int(self.slot.tokens[self.slot.n])
