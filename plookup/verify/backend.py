"""Greedy rows sampled inside llama.cpp's graph ("backend sampling"), not on the host.

A greedy sampler chain attached to a sequence (``llama_set_sampler``) adds an argmax over each of
that sequence's output rows to the decode's graph; the host then reads one token id per row
(``llama_get_sampled_token_ith``) and llama.cpp no longer copies the rows' logits out of the
backend (it does when any output row of the batch belongs to a sequence without a sampler). The
argmax runs on the very logits the host would read: ggml's argmax takes the first index of the
largest value, as llama.cpp's host greedy and ``np.argmax`` do, so the tokens are the same.

Only a chain of greedy alone: a repeat, frequency or presence penalty depends on the tokens
accepted before the row, which a backend chain learns only once they are accepted, after the
whole verify batch; a verify row past the first would be penalised as if the draft were not there.
A grammar, a Python logits processor, stopping criteria and logprobs read the rows' logits on the
host, which llama.cpp does not copy for a backend-sampled sequence.

Attaching or detaching a chain makes llama.cpp reserve its graphs again at the next decode (23-46
ms measured for SmolLM2 on 2 cores, the time of several decodes): the engine attaches a slot's
chains when a generation that uses them takes the slot and leaves them there, detaching them when
one that reads logits takes it, and before llama_cpp's own decoding (``Llama.eval``, the plain
loop), whose rows are read on the host.

A backend chain samples at most ``n_outputs_max_per_seq`` rows per sequence a decode (llama.cpp's
default is 1; plookup.Llama's contexts take n_batch, every row a verify step can have).
"""

from __future__ import annotations

import llama_cpp


class BackendGreedy:
    """``sample(ctx, i)``: batch row i's token from the backend's argmax (a sequence that has a
    chain attached, see :class:`Chains`)."""

    name = "backend"

    def sample(self, ctx, i: int) -> int:
        token = llama_cpp.llama_get_sampled_token_ith(ctx.ctx, i)
        if token < 0:  # LLAMA_TOKEN_NULL: the row's sequence had no chain in that decode
            raise RuntimeError(f"llama.cpp sampled no token for batch row {i} on the backend")
        return token


class Chains:
    """The greedy chains attached to a context's sequences: one per sequence (llama.cpp
    initialises a chain for one sequence once), freed when detached."""

    def __init__(self, ctx):
        self._ctx = ctx  # a llama_cpp LlamaContext
        self._chains: dict[int, object] = {}

    def attach(self, seqs) -> None:
        """A greedy chain on each of `seqs` (< 0: none); all or, raising, none of them."""
        new = [seq for seq in seqs if seq >= 0 and seq not in self._chains]
        for seq in new:
            chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
            llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_greedy())
            if not llama_cpp.llama_set_sampler(self._ctx.ctx, seq, chain):
                llama_cpp.llama_sampler_free(chain)
                self.detach(new)
                raise RuntimeError(f"llama.cpp cannot sample sequence {seq} on this backend")
            self._chains[seq] = chain

    def detach(self, seqs=None) -> None:
        """Detach the chains of `seqs` (default: all)."""
        for seq in list(self._chains) if seqs is None else seqs:
            chain = self._chains.pop(seq, None)
            if chain is not None:
                llama_cpp.llama_set_sampler(self._ctx.ctx, seq, None)
                llama_cpp.llama_sampler_free(chain)

