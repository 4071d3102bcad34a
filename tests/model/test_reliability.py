"""Bad input, interruption and the context limit: a clear error or a correct result, and the same
object then generates exactly what llama_cpp.Llama does.

Covered elsewhere, not repeated here: generate([]) and prompts far over n_ctx (test_decoder.py),
missing / non-GGUF / 1 MiB-truncated model files (test_decoder.py), islice + close() of generate()
(test_decoder.py), finish_reason "length" at n_ctx=64 (test_decoder.py), an index over >= 100k
tokens within its memory bound (test_kernels.py::test_large_history_finds_planted_copy_within_
memory_bound), out-of-range ids given to the indexes (test_kernels.py::test_bad_tokens_raise_and_
append_nothing) and the boundschecked kernel fuzz (tests/unit/test_kernels.py::test_boundschecked_fuzz_*); drafters on empty histories, fuzzed and
under bounds checks: tests/unit/test_drafters_fuzzed.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import llama_cpp
import numpy as np
import pytest

import plookup
from plookup.api.measured import NOTHING_MEASURED
from plookup.draft.drafters import SuffixDrafter
from plookup.index.memory import GlobalMemory
from plookup.measure.costs import DEFAULT_MAX_N, measure_cost_curve

from conftest import LLAMA_KWARGS, kv_positions

# A multiple of 256, so llama.cpp keeps it as asked and llama_cpp.Llama's own handling of
# max_tokens <= 0 (which sizes by llama.cpp's n_ctx) is a valid reference.
N_CTX = 256
KWARGS = dict(LLAMA_KWARGS, n_ctx=N_CTX)
# Tests that need drafts (and so rejections) size them with the built-in CPU curve: a curve
# measured on a loaded machine can make every draft look too dear, and then they check nothing.
# No exactness probe either: nothing here reads the verdict, and on a clean machine this setting's
# probe (n_ctx 256) took 23 s of a test worker.
DRAFTING = dict(KWARGS, **NOTHING_MEASURED)
# Plain greedy decoding on SmolLM2 has no near-tie (top-2 logit gap < 0.3, see conftest.NEAR_TIE)
# in: COPY_PROMPT's first 218 tokens (the whole context; smallest gap 0.71), the 136 tokens after
# REPEATS[:120] and the 1-3 tokens after REPEATS[:253..255] (>= 1.67), 40 tokens after each
# UTF8_PROMPTS entry (>= 0.53), 30 after BAD_BYTES (>= 1.65) and 30 after the one token "#" (0.37).
COPY_PROMPT = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,"
MAX_TOKENS = 40
BAD_BYTES = b"caf\xc3 \xff\xfe na\xefve"  # a cut-off character, bytes that are never UTF-8
UTF8_PROMPTS = ["日本語, 日本語, 日本語, 日本語,", "🙂 🙃 🙂 🙃 🙂 🙃 🙂"]  # characters split over tokens


@pytest.fixture(scope="module")
def plain(model_path):
    return llama_cpp.Llama(model_path["smollm2"], **KWARGS)


@pytest.fixture(scope="module")
def llm(model_path):
    return plookup.Llama(model_path["smollm2"], **DRAFTING)


@pytest.fixture(scope="module")
def expected(plain):
    """Plain llama_cpp's greedy completion of COPY_PROMPT."""
    return complete(plain)["choices"][0]["text"]


@pytest.fixture(scope="module")
def repeats(plain):
    """COPY_PROMPT's tokens, repeated: the drafter has long matches from the first step."""
    return plain.tokenize(COPY_PROMPT.encode()) * 7


def complete(llm, prompt=COPY_PROMPT, max_tokens=MAX_TOKENS, **kwargs):
    return llm.create_completion(prompt, max_tokens=max_tokens, temperature=0.0, **kwargs)


def streamed(llm, prompt, **kwargs) -> str:
    return "".join(chunk["choices"][0]["text"] for chunk in complete(llm, prompt, stream=True, **kwargs))


def assert_consistent(llm):
    """The KV cache holds exactly input_ids[:n_tokens]."""
    assert kv_positions(llm) == ((0, llm.n_tokens - 1) if llm.n_tokens else (-1, -1))


def assert_recovers(llm, expected):
    """The object generates what plain llama_cpp does, and leaves its cache consistent."""
    assert complete(llm)["choices"][0]["text"] == expected
    assert_consistent(llm)


# -- bad input


@pytest.mark.parametrize("prompt", ["", []])
@pytest.mark.parametrize("stream", [False, True])
def test_empty_prompt_through_create_completion(llm, expected, prompt, stream):
    # SmolLM2 adds no BOS, so "" is zero tokens; llama_cpp.Llama fails with a bare AssertionError.
    with pytest.raises(ValueError, match="empty prompt"):
        result = complete(llm, prompt, stream=stream)
        if stream:
            next(result)
    assert_recovers(llm, expected)


def test_prompt_at_and_over_n_ctx(llm, plain, expected, repeats):
    # prompt + output <= n_ctx, as llama_cpp counts it: a prompt of n_ctx tokens has no room left.
    for n in (N_CTX - 2, N_CTX - 1):
        got, want = complete(llm, repeats[:n], max_tokens=5), complete(plain, repeats[:n], max_tokens=5)
        assert got["choices"][0] == want["choices"][0]
        assert got["usage"]["completion_tokens"] == N_CTX - n
        assert_consistent(llm)
    assert list(llm.generate(repeats[:N_CTX], temp=0.0)) == []
    assert_consistent(llm)
    assert llm.n_tokens == N_CTX - 1  # everything but the last prompt token, which is pending
    for n in (N_CTX, N_CTX + 1):
        with pytest.raises(ValueError, match=f"Requested tokens \\({n}\\) exceed context window"):
            complete(llm, repeats[:n])
    with pytest.raises(ValueError, match=f"prompt of {N_CTX + 1} tokens exceeds the context window"):
        next(llm.generate(repeats[: N_CTX + 1]))
    assert_recovers(llm, expected)


@pytest.mark.parametrize("bad", ["n_vocab", 10**7, -1])
@pytest.mark.parametrize("where", [0, 5, -1])
def test_out_of_vocabulary_token_ids(llm, expected, bad, where):
    # llama_decode refuses them, but its RuntimeError says only "llama_decode returned -1".
    bad = llm.n_vocab() if bad == "n_vocab" else bad
    tokens = llm.tokenize(COPY_PROMPT.encode())
    tokens[where] = bad
    position = where % len(tokens)
    complete(llm)  # a cache to keep
    before = llm.n_tokens
    message = f"token id {bad} at position {position} is outside the vocabulary of {llm.n_vocab()}"
    with pytest.raises(ValueError, match=message):
        next(llm.generate(tokens, temp=0.0))
    with pytest.raises(ValueError, match=message):
        complete(llm, tokens)
    assert llm.n_tokens == before  # refused before anything was evaluated
    assert_recovers(llm, expected)


def test_unencodable_prompt_text(llm, expected):
    # A lone surrogate (what os.fsdecode makes of undecodable bytes) cannot become UTF-8 bytes.
    with pytest.raises(UnicodeEncodeError, match="surrogates not allowed"):
        complete(llm, "abc\udcff")
    with pytest.raises(UnicodeEncodeError, match="surrogates not allowed"):
        complete(llm, COPY_PROMPT, prediction={"type": "content", "content": "13, \udcff"})
    with pytest.raises(UnicodeEncodeError, match="surrogates not allowed"):
        llm.create_chat_completion([{"role": "user", "content": "\ud800"}], max_tokens=4)
    assert_recovers(llm, expected)


def test_invalid_utf8_prompt_bytes(llm, plain, expected):
    tokens = llm.tokenize(BAD_BYTES)
    got, want = complete(llm, tokens, max_tokens=30), complete(plain, tokens, max_tokens=30)
    assert got["choices"][0] == want["choices"][0]
    assert got["usage"]["completion_tokens"] == 30
    assert streamed(llm, tokens, max_tokens=30) == streamed(plain, tokens, max_tokens=30)
    assert_recovers(llm, expected)


@pytest.mark.parametrize("prompt", UTF8_PROMPTS)
def test_characters_split_over_tokens_and_drafts(llm, plain, expected, prompt):
    # Drafts accept several tokens at once, and the 40th token ends inside a character: the text
    # and the streamed chunks must still be llama_cpp's, which holds back incomplete characters.
    got, want = complete(llm, prompt), complete(plain, prompt)
    assert got["choices"][0] == want["choices"][0]
    assert got["usage"]["speculative"]["accepted"] > 0
    assert streamed(llm, prompt) == streamed(plain, prompt)
    assert_recovers(llm, expected)


def test_truncated_and_foreign_model_files(tmp_path, model_path):
    source = Path(model_path["smollm2"])
    size = source.stat().st_size
    cases = {"empty": 0, "magic cut": 3, "magic only": 4, "header cut": 24, "metadata cut": 4096,
             "last byte missing": size - 1}
    with open(source, "rb") as f:
        data = f.read(size - 1)
    for name, n in cases.items():
        path = tmp_path / f"{n}.gguf"
        path.write_bytes(data[:n])
        with pytest.raises(ValueError, match="not a GGUF file|Failed to load model") as error:
            plookup.Llama(str(path), **KWARGS)
        assert str(path) in str(error.value), name
    with pytest.raises(ValueError, match="is a directory"):
        plookup.Llama(str(tmp_path), **KWARGS)


def test_one_token_prompt(llm, plain, expected):
    got, want = complete(llm, [19], max_tokens=30), complete(plain, [19], max_tokens=30)  # "#"
    assert got["choices"][0] == want["choices"][0]
    assert got["usage"]["speculative"]["accepted"] > 0  # "-1000000...": drafts from 2 tokens on
    assert_recovers(llm, expected)


# -- max_tokens and the context limit


@pytest.fixture(scope="module")
def until_full(plain):
    """Plain llama_cpp's completion of COPY_PROMPT with max_tokens=0 (until n_ctx)."""
    return complete(plain, max_tokens=0)


@pytest.mark.parametrize("max_tokens", [0, -1, None])
def test_max_tokens_up_to_zero_means_until_n_ctx(llm, until_full, expected, max_tokens):
    got = complete(llm, max_tokens=max_tokens)
    assert got["choices"][0] == until_full["choices"][0]
    assert got["choices"][0]["finish_reason"] == "length"
    assert got["usage"]["completion_tokens"] == until_full["usage"]["completion_tokens"]
    assert got["usage"]["total_tokens"] == N_CTX
    assert_recovers(llm, expected)


def test_streaming_until_n_ctx(llm, until_full):
    chunks = list(complete(llm, max_tokens=0, stream=True))
    assert "".join(c["choices"][0]["text"] for c in chunks) == until_full["choices"][0]["text"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert_consistent(llm)


def test_n_ctx_that_llama_cpp_rounds_up(model_path, plain, expected):
    # llama.cpp makes n_ctx=128 a 256-token context while llama_cpp.Llama's buffers hold 128:
    # max_tokens=0 used to ask for 256 - prompt tokens, get 128 - prompt and return no text.
    small = plookup.Llama(model_path["smollm2"], **dict(KWARGS, n_ctx=128), cost_curve=None, exactness=None)
    room = 128 - len(small.tokenize(COPY_PROMPT.encode()))
    want = complete(plain, max_tokens=room)
    for max_tokens in (0, 1000):
        got = complete(small, max_tokens=max_tokens)
        assert got["choices"][0] == want["choices"][0]
        assert got["usage"]["completion_tokens"] == room
        assert streamed(small, COPY_PROMPT, max_tokens=max_tokens) == want["choices"][0]["text"]
    with pytest.raises(ValueError, match="exceed context window"):
        complete(small, plain.tokenize(COPY_PROMPT.encode()) * 4)
    assert_recovers(small, expected)


def test_generate_runs_into_n_ctx_and_stops(llm, plain, repeats, expected):
    prompt = repeats[:120]
    tokens = list(llm.generate(prompt, temp=0.0))
    assert len(tokens) == N_CTX - len(prompt)
    assert llm.detokenize(tokens).decode() == complete(plain, prompt, max_tokens=0)["choices"][0]["text"]
    assert llm.last_stats.accepted > 0  # drafting up to the end, in the room left
    assert llm.n_tokens == N_CTX - 1
    assert llm.input_ids[: N_CTX - 1].tolist() == [*prompt, *tokens][: N_CTX - 1]
    assert_consistent(llm)
    assert_recovers(llm, expected)


def test_cost_curve_fits_a_small_context(model_path, monkeypatch, tmp_path):
    # Measuring used to evaluate 256 tokens of context whatever n_ctx was. (n_ctx 16 checked the
    # same rule in 25 s of a test worker's time, against 7 s here.)
    n_ctx = 8
    monkeypatch.setenv("PLOOKUP_CACHE_DIR", str(tmp_path))
    small = plookup.Llama(model_path["smollm2"], **dict(KWARGS, n_ctx=n_ctx))  # measures
    assert len(small.drafter.policy.cost) == min(DEFAULT_MAX_N, n_ctx)  # n_batch <= n_ctx bounds the batch
    cost = measure_cost_curve(small, repeats=1)
    assert len(cost) == min(DEFAULT_MAX_N, n_ctx) and np.all(np.isfinite(cost) & (cost > 0))
    assert complete(small, [19], max_tokens=4)["usage"]["completion_tokens"] == 4


@pytest.mark.parametrize("max_draft", [0, 1])
def test_a_model_that_never_drafts_measures_nothing(model_path, monkeypatch, tmp_path, max_draft):
    """max_draft 0 (drafting off) on one slot: no exactness probe or cost curve at load, as none
    would be read; 1 (the control) measures both."""
    monkeypatch.setenv("PLOOKUP_CACHE_DIR", str(tmp_path))
    llm = plookup.Llama(model_path["smollm2"], max_draft=max_draft, **dict(KWARGS, n_ctx=8))  # 8 rows: seconds
    measured = sorted(p.parent.name for p in tmp_path.glob("*/*.json"))
    if max_draft:
        assert measured == ["cost-curves", "invariance"] and llm.exact is not None
    else:
        assert measured == [] and llm.exact is None and llm.calibration_pending is None
        assert complete(llm, [19], max_tokens=4)["usage"]["completion_tokens"] == 4


# -- interruption


def consume(make_tokens, n):
    """Take `n` tokens, then raise KeyboardInterrupt as a Ctrl-C in the consumer would.

    Only the loop holds the iterator `make_tokens()` returns, so it dies as the exception leaves
    this frame (a traceback keeps the frame's variables, not its loop)."""
    got = []
    for token in make_tokens():
        got.append(token)
        if len(got) == n:
            raise KeyboardInterrupt
    return got


@pytest.mark.parametrize("n", [1, 9])
def test_keyboard_interrupt_in_consumer_loop(llm, expected, repeats, n):
    prompt = repeats[:120]
    with pytest.raises(KeyboardInterrupt):
        consume(lambda: llm.generate(prompt, temp=0.0), n)  # closed as the exception leaves
    assert_consistent(llm)
    assert n <= llm.n_tokens - len(prompt) + 1 <= n + 1  # what the consumer saw, maybe - pending
    assert_recovers(llm, expected)
    # The same, the interrupted generator kept alive: its late close() must not spoil later calls.
    generator = llm.generate(prompt, temp=0.0)
    with pytest.raises(KeyboardInterrupt):
        consume(lambda: generator, n)
    assert_recovers(llm, expected)
    generator.close()
    assert_consistent(llm)
    assert_recovers(llm, expected)


@pytest.mark.parametrize("stop", ["break", "interrupt"])
def test_streaming_consumer_stops(llm, expected, repeats, stop):
    stream = complete(llm, repeats[:120], stream=True)
    chunks = 0
    try:
        for _ in stream:
            chunks += 1
            if chunks == 5:
                if stop == "interrupt":
                    raise KeyboardInterrupt
                break
    except KeyboardInterrupt:
        pass
    del stream
    assert chunks == 5
    assert_consistent(llm)
    assert_recovers(llm, expected)


class InterruptingDrafter(SuffixDrafter):
    """Raises KeyboardInterrupt from its `at`-th proposal (only that one)."""

    def __init__(self, at, **kwargs):
        super().__init__(**kwargs)
        self.at, self.calls = at, 0

    def propose(self, limit=None):
        self.calls += 1
        if self.calls == self.at:
            raise KeyboardInterrupt
        return super().propose(limit)


@pytest.mark.parametrize("at", [1, 4])
@pytest.mark.parametrize("memory", [False, True])
def test_keyboard_interrupt_in_drafter(llm, expected, repeats, monkeypatch, at, memory):
    drafter = InterruptingDrafter(at, memory=GlobalMemory(4096) if memory else None)
    monkeypatch.setattr(llm, "drafter", drafter)
    prompt = repeats[:120]
    with pytest.raises(KeyboardInterrupt):
        complete(llm, prompt, max_tokens=0)  # long drafts: 136 tokens take ~10 proposals
    assert drafter.calls == at
    assert_consistent(llm)
    assert llm.n_tokens >= len(prompt) - 1
    assert_recovers(llm, expected)
    # The drafter's history is the prompt and every token generated after it.
    prompt = llm.tokenize(COPY_PROMPT.encode())
    assert len(drafter.index) == len(prompt) + MAX_TOKENS
    assert drafter.index.tokens[: llm.n_tokens].tolist() == llm.input_ids[: llm.n_tokens].tolist()


@pytest.mark.parametrize("at", [1, 2, 5])
def test_keyboard_interrupt_as_decode_returns(llm, expected, repeats, monkeypatch, at):
    # Ctrl-C during llama_decode is raised when it returns: the cache holds the batch, but
    # n_tokens and input_ids do not. Call 1 is the prompt's eval, the others verify steps.
    decode, sizes = llm._ctx.decode, []

    def interrupted_decode(batch):
        decode(batch)
        sizes.append(batch.batch.n_tokens)
        if len(sizes) == at:
            raise KeyboardInterrupt

    llm.reset()  # the prompt is evaluated afresh: call 1 is its eval
    monkeypatch.setattr(llm._ctx, "decode", interrupted_decode)
    with pytest.raises(KeyboardInterrupt):
        complete(llm, repeats[:120], max_tokens=0)
    monkeypatch.undo()
    if at > 1:
        assert sizes[-1] > 1  # a draft was in flight
        assert_consistent(llm)
    assert_recovers(llm, expected)


# -- the drafters' contract under random use; with NUMBA_BOUNDSCHECK=1 below, an out-of-bounds
# access in the index or policy kernels raises instead of corrupting memory


# -- a memory that refuses to drop rejected draft tokens


def test_a_failing_seq_rm_means_plain_decoding_never_wrong_output(model_path, expected):
    llm = plookup.Llama(model_path["smollm2"], **DRAFTING)
    refused, seq_rm = [], llm._ctx.kv_cache_seq_rm

    def refusing_seq_rm(seq_id, p0, p1):  # as a recurrent memory: all or nothing
        if p0 > 0:
            refused.append(p0)
            return False
        return seq_rm(seq_id, p0, p1)

    llm._ctx.kv_cache_seq_rm = refusing_seq_rm
    with pytest.warns(UserWarning, match="could not remove rejected draft tokens"):
        got = complete(llm)
    assert refused and not llm.can_roll_back  # it happened, and drafting stopped
    assert got["choices"][0]["text"] == expected  # the rejected tokens never reached the output
    assert complete(llm)["choices"][0]["text"] == expected  # plainly, from then on
    assert complete(llm)["usage"]["speculative"]["drafted"] == 0
    del llm._ctx.kv_cache_seq_rm
    assert_consistent(llm)


def test_recurrent_models_decode_plainly_with_one_warning(model_path, monkeypatch, expected):
    # No recurrent GGUF ships with the test models: llama_cpp's own flags stand in for one.
    monkeypatch.setattr(llama_cpp.llama_cpp, "llama_model_is_recurrent", lambda model: True)
    with pytest.warns(UserWarning, match="cannot drop rejected draft tokens; decoding it plainly"):
        llm = plookup.Llama(model_path["smollm2"], **KWARGS)
    monkeypatch.undo()
    assert not llm.can_roll_back and llm.exact is None
    out = complete(llm)
    assert out["choices"][0]["text"] == expected and out["usage"]["speculative"]["drafted"] == 0


# -- files written whole, for their owner only


def test_cost_curve_cache_is_owner_only_and_a_corrupt_one_is_replaced(model_path, tmp_path, monkeypatch):
    from plookup.measure.costs import cached_cost_curve, curve_key

    monkeypatch.setenv("PLOOKUP_CACHE_DIR", str(tmp_path))
    llm = plookup.Llama(model_path["smollm2"], **dict(KWARGS, n_ctx=8))  # measures (8 rows: seconds) and caches
    path = tmp_path / "cost-curves" / f"{curve_key(llm)}.json"
    assert path.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary left behind
    path.write_text('{"cost": [1.0, ')
    with pytest.warns(UserWarning, match="unreadable verify-cost curve"):
        cost = cached_cost_curve(llm)
    assert len(cost) == 8 and json.loads(path.read_text())["cost"] == cost.tolist()
