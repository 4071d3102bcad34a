"""llama_cpp.Llama as its own code sees it while plookup runs a call: the running call's seed,
tokens and sampler chain (:data:`~plookup.api.call.current_call`), not slot 0's or the model's,
and its plain ``eval`` kept apart from the engine's backend chains.
"""

from __future__ import annotations

from typing import Sequence

import llama_cpp
import numpy as np

from ..verify.greedy import logits_row
from .call import current_call


class RunningCallView(llama_cpp.Llama):
    """The attributes and methods llama_cpp's completion code and chat handlers reach, answered
    for the running call; :class:`plookup.Llama` is one."""

    @property
    def _seed(self) -> int:
        call = current_call.get()
        return call.seed if call is not None and call.seed is not None else self._model_seed

    @_seed.setter
    def _seed(self, seed: int) -> None:
        # llama_cpp's completion sets the seed, then builds the call's sampler from it: the
        # running call keeps its own, so that calls on other threads cannot change it meanwhile.
        self._model_seed = seed
        call = current_call.get()
        if call is not None:
            call.seed = seed

    @property
    def _input_ids(self) -> np.ndarray:
        """llama_cpp's completion code checks its stopping criteria on ``_input_ids`` once a
        generation ends: the running call's slot's tokens, not slot 0's."""
        call = current_call.get()
        gen = call.generation if call is not None else None
        if gen is not None and gen.history is not None:  # it ended: its slot may be another's now
            return gen.history
        if gen is not None and gen.slot is not None and gen.slot.index != 0:
            return gen.slot.tokens[: gen.slot.n]
        return self.input_ids[: self.n_tokens]

    @property
    def _scores(self) -> np.ndarray:
        # ... and on _scores[-1]: plookup keeps no scores (it samples from the context's rows),
        # so that row is whatever llama_cpp left there; never an empty view to index.
        return self.scores[: max(1, self.n_tokens), :]

    def _init_sampler(self, **sampling):
        # llama_cpp builds the chain of every generation that samples on the host, its own plain
        # loop's included: the running call's llama-server chain where it has one.
        call = current_call.get()
        if call is not None and call.chain is not None:
            return call.chain.build(self, self._seed, **sampling)
        return super()._init_sampler(**sampling)

    def eval(self, tokens: Sequence[int]) -> None:
        self._check_weights()
        # llama_cpp's eval reads sequence 0's logits, which a backend chain there would keep on
        # the backend; and writes the tokens into input_ids, slot 0's buffer, behind its drafter.
        self._engine.chains.detach()
        self._engine.rewritten()
        super().eval(tokens)

    def load_state(self, state) -> None:
        # the whole memory replaced: slot 0's buffer is llama_cpp's, and its kept cells are gone
        if self._engine is not None:
            self._engine.rewritten()
        super().load_state(state)

    def _check_weights(self) -> None:
        if self._engine is None:
            raise ValueError(f"{self.model_path} was loaded with vocab_only=True: it tokenizes and detokenizes, "
                             f"generating needs the weights (load it without vocab_only)")  # fmt: skip

    def _logits_row(self, i: int) -> np.ndarray:
        return logits_row(self._ctx, i, self._n_vocab)
