"""The FIM prompt's parts, sized as llama-server's format_prompt_infill sizes them from the server's
batch (-b) and the slot's context, on Qwen2.5-Coder's tokenizer (a vocab-only load): the prefix's
last 3/4 of a batch, the suffix's first 1/4 less the prompt and two, the chunks' newest tokens in
what the context leaves after a batch and twice n_predict."""

from __future__ import annotations

import llama_cpp
import pytest

from plookup.api.fim import fim_tokens, infill_prompt

from conftest import CODER

LINE = "    value = compute(value, other) + 1\n"  # 11 tokens
PREFIX, SUFFIX, CHUNK = LINE * 400, LINE * 200, LINE * 300


class Window:
    """The tokenizer with a slot's context of `n_ctx` tokens (infill_prompt reads no more)."""

    def __init__(self, vocab, n_ctx: int):
        self.vocab, self._n_ctx = vocab, n_ctx

    def __getattr__(self, name):
        return getattr(self.vocab, name)

    def n_ctx(self) -> int:
        return self._n_ctx


@pytest.fixture(scope="module")
def vocab(model_path):
    return llama_cpp.Llama(model_path[CODER], vocab_only=True, verbose=False)


def parts(vocab, prompt: list[int]) -> tuple[int, int, int]:
    """(chunk tokens, prefix tokens, suffix tokens) of a laid-out prompt: [chunks] <PRE> prefix
    middle <SUF> suffix <MID>."""
    fim = fim_tokens(vocab)
    pre, suf = prompt.index(fim.pre), prompt.index(fim.suf)
    assert prompt[-1] == fim.mid
    return pre, suf - pre - 1, len(prompt) - suf - 2


@pytest.mark.parametrize("n_batch", [512, 1024, 2048])
@pytest.mark.parametrize("n_ctx,n_predict", [(8192, 128), (4096, -1), (2048, 128), (1024, 64)])
def test_the_parts_are_llama_servers_counts(vocab, n_batch, n_ctx, n_predict):
    middle = "result = "
    prompt = infill_prompt(Window(vocab, n_ctx), fim_tokens(vocab), PREFIX, SUFFIX, middle,
                           [("a.py", CHUNK), ("b.py", CHUNK)], n_predict, n_batch)
    tokenize = lambda text: vocab.tokenize(text.encode(), add_bos=False)  # noqa: E731
    n_middle = len(tokenize(middle))
    chunks, prefix, suffix = parts(vocab, prompt)
    assert prefix - n_middle == min(len(tokenize(PREFIX)), 3 * (n_batch // 4))
    assert suffix == min(len(tokenize(SUFFIX)), max(0, n_batch // 4 - (2 + n_middle)))
    repo, file = 1 + len(tokenize("myproject\n")), 1 + len(tokenize("filename\n"))  # <REP>myproject, <SEP>filename
    all_chunks = repo + 2 * (1 + len(tokenize("a.py\n")) + len(tokenize(CHUNK))) + file
    assert chunks == min(all_chunks, max(0, n_ctx - n_batch - 2 * n_predict))


def test_llama_vims_recommended_batch_gives_768_and_254(vocab):
    """llama.vim's server (`--fim-qwen-1.5b-default`: -b 1024): the prefix's last 768 tokens, the
    suffix's first 254, where 2,048 gave 1,536 and 510."""
    prompt = infill_prompt(Window(vocab, 8192), fim_tokens(vocab), PREFIX, SUFFIX, "", [], 128, 1024)
    assert parts(vocab, prompt)[1:] == (768, 254)
    prompt = infill_prompt(Window(vocab, 8192), fim_tokens(vocab), PREFIX, SUFFIX, "", [], 128, 2048)
    assert parts(vocab, prompt)[1:] == (1536, 510)
