"""How a call's tokens are chosen: on the engine, each verified row read as an argmax in place
(:mod:`plookup.verify.greedy`), on llama.cpp's graph (:mod:`plookup.verify.backend`) or by
llama.cpp's sampler chain; or, where drafting cannot be, by llama_cpp's own plain loop.
"""

from __future__ import annotations

import warnings

from ..verify.backend import BackendGreedy
from ..verify.greedy import greedy_rows


def engine_sampler(llm, call, grammar, stopping_criteria, sampling: dict):
    """The sampler the engine reads the call's rows with (``call.stats.sampler`` names it)."""
    # A greedy chain without a grammar reads each row's argmax in place (plookup.verify.greedy), or
    # has it read on the backend where nothing else reads the row (plookup.verify.backend):
    # stopping criteria and logprobs read it.
    sampler = greedy_rows(llm._n_vocab, llm.last_n_tokens_size, grammar=grammar, **sampling)
    if call.chain is not None:
        sampler = None  # built as the request lists it (its logit bias, say), never read as an argmax
    reads_rows = stopping_criteria is not None or call.logprobs is not None
    if sampler is not None and llm.backend_sampling and sampler.window is None and not reads_rows:
        sampler = BackendGreedy()
    call.stats.sampler = sampler.name if sampler is not None else "chain"
    return sampler or llm._init_sampler(grammar=grammar, **sampling)


def plain_tokens(llm, call, generate, tokens, logits_processor, stopping_criteria, grammar, sampling: dict):
    """The call's tokens from llama_cpp's own loop (`generate`, llama_cpp.Llama's) on sequence 0,
    the whole context to itself: a Python logits processor reads ``_input_ids`` at every call,
    which during a verify step would include unverified draft tokens."""
    if logits_processor is not None:
        warnings.warn("plookup: logits_processor given, decoding without speculation")
    stats = call.stats
    stats.sampler = "plain"
    with llm._engine.exclusive():
        for token in generate(
            tokens, logits_processor=logits_processor, stopping_criteria=stopping_criteria,
            grammar=grammar, **sampling,
        ):
            if call.is_cancelled():
                return
            if call.logprobs is not None:  # the row it was sampled from is the newest
                call.logprobs.read(llm._logits_row(-1), token)
            stats.record_step(0, 0)
            stats.generated += 1
            if call.on_token is not None:
                call.on_token(token)
            yield token
