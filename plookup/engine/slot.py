"""A slot: one sequence of the engine's context, and the generation running on it.

A :class:`Slot` is a sequence id (and a second one for a draft's branch) with the tokens its KV
cells hold: ``tokens[:n]``. Slot 0's tokens are the model's own ``input_ids`` / ``n_tokens``, so
that llama_cpp's methods on the model (``eval``, ``reset``, ``save_state``) keep reading sequence 0
as they always have; the other slots own theirs. A slot keeps its cells after a generation, so the
next request whose prompt shares a prefix with them does not prefill it again.

A :class:`Generation` is one request on a slot: its call, drafter, sampler and stopping criteria,
the prompt still to decode, and the tokens emitted but not yet taken by its consumer.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Optional

import numpy as np


class Slot:
    def __init__(self, index: int, seq: int, branch_seq: int, model=None, size: int = 0):
        self.index, self.seq, self.branch_seq = index, seq, branch_seq
        self._model = model  # slot 0: the llama_cpp.Llama whose input_ids / n_tokens it uses
        self._tokens = None if model is not None else np.zeros(size, dtype=np.intc)
        self._n = 0
        self.generation: Optional[Generation] = None  # the request running here, if any
        # Slots >= 1: the drafter spawned from the model's, and what it was spawned from (Engine._drafter).
        self.drafter, self.drafter_made_from = None, None

    @property
    def tokens(self) -> np.ndarray:
        return self._model.input_ids if self._model is not None else self._tokens

    @property
    def n(self) -> int:
        """How many of ``tokens`` the sequence's KV cells hold."""
        return self._model.n_tokens if self._model is not None else self._n

    @n.setter
    def n(self, value: int) -> None:
        if self._model is not None:
            self._model.n_tokens = value
        else:
            self._n = value

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
    prompt: list[int]
    pending: Optional[int] = None  # the newest emitted token, not yet in the cache; None while prefilling
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

    @property
    def prefilling(self) -> bool:
        return self.pending is None
