"""The context plookup decodes in: llama_cpp's replaced by one with a sequence per slot (and one
per draft branch), its decodes on a thread of their own where that helps, and the engine over it,
handed a :class:`~plookup.engine.ContextHandle` on it and slot 0's cells (:class:`ModelCells`).

Here, in the API, plookup reads llama_cpp.Llama's own private members (its context, batch, model,
``_n_ctx``, ``_requires_eval``): the engine and the app get what they need from them through the
handle, the cells and :class:`plookup.Llama`'s public methods.
"""

from __future__ import annotations

import contextlib
import ctypes

import llama_cpp
import llama_cpp._internals as internals

from ..draft.sizing import context_layout
from ..engine import ContextHandle, Engine
from ..engine.decode_thread import DecodeThread, teams_per_thread
from ..engine.slot import attribute_of


def start_engine(llm, parallel: int, decode_thread) -> bool:
    """The model's context recreated for `parallel` slots and its :class:`~plookup.engine.Engine`;
    returns whether each slot has a KV stream of its own."""
    # Recurrent and hybrid memories cannot drop a suffix, so rejected draft tokens would stay.
    llm.can_roll_back = not (llm._is_recurrent or llm._is_hybrid)
    if parallel > 1 and not llm.can_roll_back:
        raise ValueError(f"parallel={parallel}: {llm.model_path} keeps a recurrent state, which plookup "
                         f"decodes plainly, one generation at a time; use parallel=1")
    if parallel > llm.n_batch:
        raise ValueError(f"parallel={parallel} needs n_batch >= {parallel} (one row per slot a step)")
    if (parallel > 1 if decode_thread is None else decode_thread) and teams_per_thread():
        llm._decode_thread = DecodeThread()  # before the first decode: see its module
        llm._stack.callback(llm._decode_thread.close)
    # With several slots, a KV stream per slot (see plookup.draft.sizing), and so no
    # sequences for a second branch.
    streams = parallel > 1
    recreate_context(llm, parallel, streams=streams)
    llm._engine = Engine(context_handle(llm), ModelCells(llm), llm, parallel, branch_sequences=not streams,
                         streams=streams, kept_sequence=not streams and parallel == 1)
    llm._stack.callback(llm._engine.chains.detach)  # (runs before the context is freed)
    return streams


def context_handle(llm: llama_cpp.Llama) -> ContextHandle:
    """The engine's handle on `llm`'s context (as it is now: after :func:`recreate_context`)."""
    return ContextHandle(llm._ctx, llm._batch, llm._model.vocab, llm._n_ctx, llm.n_batch, llm._n_vocab)


class ModelCells:
    """Slot 0's tokens and count: the model's own ``input_ids`` / ``n_tokens`` (read through the
    model each time: ``load_state`` replaces the array, which the slot's drafter then binds anew at
    its next admission), so that llama_cpp's methods on the model (``eval``, ``reset``,
    ``save_state``) keep reading sequence 0 as the engine leaves it."""

    def __init__(self, llm: llama_cpp.Llama):
        self.llm = llm

    tokens = attribute_of("llm", "input_ids")
    n = attribute_of("llm", "n_tokens")

    def logits_gone(self) -> None:
        logits_stale(self.llm)


def logits_stale(llm: llama_cpp.Llama) -> None:
    """Tell llama_cpp's own ``generate`` that the context's newest logits are not the last row of
    the tokens it has cached (another sequence's, a verify batch's), so that a prompt it finds
    cached whole is decoded again before it samples. llama_cpp keeps that in a private flag,
    ``_requires_eval``, with no public way to set it but ``reset`` (which forgets the cache too):
    this is plookup's one place outside :mod:`plookup.measure` that writes it."""
    llm._requires_eval = True


def is_eog(llm: llama_cpp.Llama, token: int) -> bool:
    """Whether `token` ends a generation in `llm`'s vocabulary (any llama_cpp.Llama, by its public API)."""
    return bool(llama_cpp.llama_vocab_is_eog(llama_cpp.llama_model_get_vocab(llm.model), token))


def recreate_context(llm, parallel: int, streams: bool = False) -> None:
    """Each slot decodes on a sequence of its own, and verifies a second branch on another,
    sharing cells with the first (kv_unified: a split cache would also split each sequence's
    window); one more sequence holds the cells a lone slot keeps from an earlier prompt
    (plookup.engine.reuse). llama_cpp.Llama offers no such parameters, so its context is replaced
    by one that has 2 * parallel + 1 sequences and, with several slots, parallel * n_ctx cells. With
    `streams`, each of `parallel` sequences has a stream of n_ctx cells and no second branch.
    Its decodes stay on one thread (:mod:`plookup.engine.decode_thread`)."""
    params = llm.context_params
    # (unless llama_cpp made one already, e.g. in its embedding mode; it never makes one with
    # llama.cpp's own choice of flash attention: plookup.api.load.load_model)
    layout = context_layout(llm._n_ctx, parallel, streams)
    made = params.n_seq_max >= layout.n_seq_max and params.kv_unified and params.n_outputs_max_per_seq == 0
    if not (parallel == 1 and made and params.flash_attn_type != llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO):
        params.n_outputs_max_per_seq = 0  # n_batch: a backend chain samples every row of a verify step
        params.n_seq_max, params.kv_unified = layout.n_seq_max, layout.unified
        params.n_ctx = layout.n_ctx if parallel > 1 else params.n_ctx
        llm._ctx.close()  # free the first cache before allocating the second
        llm._ctx = llm._stack.enter_context(
            contextlib.closing(
                internals.LlamaContext(model=llm._model, params=params, verbose=llm.verbose)
            )
        )
    if llm._decode_thread is not None:
        llm._ctx.decode = llm._decode_thread.route(llm._ctx.decode)
    if llm._lora_adapter is not None:
        adapters = (llama_cpp.llama_adapter_lora_p_ctypes * 1)(llm._lora_adapter)
        scales = (ctypes.c_float * 1)(llm.lora_scale)
        if llama_cpp.llama_set_adapters_lora(llm._ctx.ctx, adapters, 1, scales):
            raise RuntimeError(f"Failed to set LoRA adapter from lora path: {llm.lora_path}")
