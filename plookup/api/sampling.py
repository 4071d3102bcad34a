"""How a call's tokens are chosen: on the engine, each verified row read as an argmax in place
(:mod:`plookup.verify.greedy`), on llama.cpp's graph (:mod:`plookup.verify.backend`) or by
llama.cpp's sampler chain; or, where drafting cannot be, by llama_cpp's own plain loop.

**A seed gives the same text whatever was drafted.** A call samples with its own chain, built for
the generation from the call's seed (:class:`plookup.api.views.RunningCallView` keeps the seed per call, so
calls on other slots never reseed it), and the acceptance rule (:func:`plookup.verify.accept.accept`)
samples each emitted token's row exactly once, in order, and no other row: the k-th token is drawn
with the chain's k-th random number, as in plain decoding, however many draft tokens were
verified, accepted or thrown away, and whatever the memory drafted. So the text depends on the
seed and the rows' logits only. Where verify batches are bitwise equal to plain decoding
(``Llama.exact``, ``plookup doctor``), the rows are the same whatever the batch: the text is
llama_cpp.Llama's for that seed, on every repeat. Where they are not (the default build), a row's
logits move with the batch it was verified in, and a different draft could tip a draw over to
another token: there a request that names a seed and samples at random is decoded without drafts
(:func:`seeded_where_drafts_show`), its prompt's last token in a pass of its own (as a repeat that
finds the rest of its prompt cached decodes it), so that its repeats give one text as
llama-server's do. A request without a seed, or greedy, drafts as ever. What no build makes equal
there: rows decoded beside other slots' rows (``parallel`` > 1, as on llama-server), and a prompt
whose cached prefix was computed in other batches (another request's).
"""

from __future__ import annotations

import warnings

import llama_cpp

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


def seeded_where_drafts_show(seed, temperature: float, exact) -> bool:
    """Whether a completion that names `seed` and samples at `temperature` runs where verify
    batches are not known to be exact: then its drafts could change its text (the module's
    docstring), and it decodes without them. llama_cpp's LLAMA_DEFAULT_SEED is "random"."""
    seeded = seed is not None and seed != llama_cpp.LLAMA_DEFAULT_SEED
    return seeded and temperature != 0 and exact is not True
