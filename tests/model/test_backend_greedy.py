"""Greedy rows sampled on the backend (plookup.verify.backend) pick the host's tokens.

On every test model, one decode with a greedy chain attached to sequence 0 and none to sequence 1:
llama.cpp then copies every row's logits (a row of sequence 1 needs them) and also samples
sequence 0's rows in the graph, so the backend's token and the host's argmax are read from the
very same row. Control: a wrong argmax (the second largest logit) is told apart. Then whole
generations with ``backend_sampling=True`` against the argmax rows: the same drafts and batches,
so the same tokens and the same steps; and the calls the backend cannot sample (a repeat penalty,
stopping criteria, sampling at random, a logits processor) keep their host samplers on the same
model, before and after a backend call.
"""

from __future__ import annotations

import llama_cpp
import numpy as np
import pytest

from plookup.verify.backend import BackendGreedy
from plookup.verify.rows import fill, sequence_rows

from support.plain import chat_prompt_tokens

MESSAGES = [{"role": "user", "content": "Repeat this list three times: apple, pear, plum, fig."}]


class SecondBest(BackendGreedy):
    """A broken argmax: the second largest logit."""

    def __init__(self, llm):
        self.llm = llm

    def sample(self, ctx, i):
        return int(np.argsort(self.llm._logits_row(i), kind="stable")[-2])


def test_backend_tokens_are_the_host_argmax_of_the_same_rows(any_model_pair):
    name, _, llm = any_model_pair
    llm._engine.forget()  # the test's cells replace the slots' cached prompts
    rng = np.random.default_rng(5)
    prompt = rng.integers(100, llm.n_vocab(), 40).tolist()
    draft = rng.integers(100, llm.n_vocab(), 16).tolist()
    chains = llm._engine.chains  # one record of what is attached to the context
    try:
        chains.detach()
        chains.attach([0])
        # The prompt's last row and a 16-row verify batch on sequence 0; a row on sequence 1
        # makes llama.cpp copy every row's logits too.
        rows = sequence_rows(prompt, 0, 0) + [(draft[0], 0, (1,))]
        fill(llm._batch.batch, rows, [False] * (len(prompt) - 1) + [True, True])
        llm._ctx.decode(llm._batch)
        assert BackendGreedy().sample(llm._ctx, len(prompt) - 1) == int(np.argmax(llm._logits_row(len(prompt) - 1)))
        fill(llm._batch.batch, sequence_rows(draft, len(prompt), 0) + [(draft[1], 1, (1,))])
        llm._ctx.decode(llm._batch)
        outputs = range(len(draft))
        backend = [BackendGreedy().sample(llm._ctx, i) for i in outputs]
        host = [int(np.argmax(llm._logits_row(i))) for i in outputs]
        assert backend == host, name
        wrong = [SecondBest(llm).sample(llm._ctx, i) for i in outputs]
        assert all(w != b for w, b in zip(wrong, backend)), name  # control: caught on every row
        with pytest.raises(RuntimeError, match="sampled no token for batch row 16"):
            BackendGreedy().sample(llm._ctx, 16)  # sequence 1's row: no chain there
    finally:
        chains.detach()
        for seq in (0, 1):
            llm._ctx.kv_cache_seq_rm(seq, 0, -1)
        llm.reset()


def generate(llm, prompt, n: int = 48, **kwargs) -> list[int]:
    tokens = []
    for token in llm.generate(prompt, temp=kwargs.pop("temp", 0.0), **kwargs):
        tokens.append(token)
        if len(tokens) >= n:
            break
    return tokens


@pytest.mark.budget(60)
def test_backend_sampling_gives_the_argmax_rows_tokens_and_steps(any_model_pair):
    name, plain, llm = any_model_pair
    prompt = chat_prompt_tokens(llm, MESSAGES)
    try:
        llm.backend_sampling = False
        llm.drafter.policy.past.clear()  # both runs from the fixed prior: the same drafts
        host = generate(llm, prompt, repeat_penalty=1.0)
        host_stats = llm.last_stats.as_dict()
        assert host_stats["sampler"] == "argmax"
        llm.backend_sampling = True
        llm.drafter.policy.past.clear()
        backend = generate(llm, prompt, repeat_penalty=1.0)
        stats = llm.last_stats.as_dict()
        assert stats["sampler"] == "backend", name
        assert backend == host, name
        # The same drafts verified in the same batches: the same steps and acceptances.
        same = ("forward_passes", "drafted", "accepted", "accepted_per_position")
        assert [stats[k] for k in same] == [host_stats[k] for k in same], name
        assert stats["accepted"] > 0, name  # verify steps, not single rows only
        assert set(llm._engine.chains._chains) == {0, 1}  # left attached for the next greedy call
        # llama_cpp's eval reads the row's logits: the chains go first, else the row is stale
        llm.reset()
        llm.eval(prompt[:4])
        assert not llm._engine.chains._chains
        plain.reset()
        plain.eval(prompt[:4])
        assert np.abs(llm.scores[3] - plain.scores[3]).max() < 0.5, name
    finally:
        llm.backend_sampling = False


@pytest.mark.budget(60)
def test_calls_the_backend_cannot_sample_stay_on_the_host(smol):
    prompt = chat_prompt_tokens(smol, MESSAGES)
    try:
        smol.backend_sampling = True
        reference = generate(smol, prompt, n=24, repeat_penalty=1.0)
        assert smol.last_stats.sampler == "backend"
        generate(smol, prompt, n=24, repeat_penalty=1.3)
        assert smol.last_stats.sampler == "argmax"  # the penalty depends on the draft's own tokens
        never = llama_cpp.StoppingCriteriaList([lambda ids, logits: False])
        assert generate(smol, prompt, n=24, repeat_penalty=1.0, stopping_criteria=never) == reference
        assert smol.last_stats.sampler == "argmax"  # stopping criteria read the row's logits
        generate(smol, prompt, n=24, temp=0.8, repeat_penalty=1.0)
        assert smol.last_stats.sampler == "chain"
        # llama_cpp's own loop reads logits on sequence 0, where the backend's chain was
        identity = llama_cpp.LogitsProcessorList([lambda ids, scores: scores])
        with pytest.warns(UserWarning, match="logits_processor given"):
            plain = generate(smol, prompt, n=24, repeat_penalty=1.0, logits_processor=identity)
        assert smol.last_stats.sampler == "plain"
        # plain decoding's tokens up to its first near-tie at most: compare the first 8
        assert plain[:8] == reference[:8]
        assert generate(smol, prompt, n=24, repeat_penalty=1.0) == reference
        assert smol.last_stats.sampler == "backend"
        smol.prefill(prompt, temp=0.0, repeat_penalty=1.0)  # the bench's and the doctor's prefill
        assert set(smol._engine.chains._chains) == {0, 1}  # kept: no graph reserve in what follows
        assert generate(smol, prompt, n=24, repeat_penalty=1.0) == reference
    finally:
        smol.backend_sampling = False
