"""Fill-in-the-middle prompts from the model's own FIM tokens, laid out as llama-server lays them.

A code model trained for infilling has tokens that mark the text before the cursor (FIM prefix),
after it (FIM suffix) and where the answer goes (FIM middle); Qwen2.5-Coder also has repo-level
ones, a repository name and a file separator, for other files given as context. llama.cpp reads
them from the GGUF vocabulary (``llama_vocab_fim_*``); a model without the three FIM tokens cannot
infill, and is refused by name rather than given a prompt it was never trained on.

The layout follows llama-server's code (``format_prompt_infill``), so an editor plugin gets the
prompt it would get there: the other files' chunks first (after ``<REP>myproject``, each as
``<SEP>filename`` and its text, then ``<SEP>filename`` for the file being edited; without a file
separator, each after a plain "--- snippet ---" line), then ``[BOS] <PRE> prefix prompt <SUF>
suffix <MID>`` (``spm_infill``: the suffix part first). The prefix keeps its last 3/4 of the
server's batch of tokens (its ``-b/--batch-size``, 2048 unless told, as llama-server's), the suffix
its first 1/4 less the prompt's and two, and the chunks what the context leaves after a batch and
twice the tokens to predict, the newest (last) chunks first: with llama.vim's recommended ``-b
1024`` a request gets the 768 and 254 tokens llama-server gives it. Those chunks are in the prompt,
so plookup's drafter also drafts from them: infilled code copies from them often.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Sequence

import llama_cpp

from ..draft.sizing import LLAMA_SERVER_N_BATCH, fim_budget

CHUNK_SEPARATOR = "\n\n--- snippet ---\n\n"  # between chunks, for a model without a file separator
REPO_NAME = "myproject\n"  # llama-server's: its clients send no repository name
FILE_NAME = "filename\n"  # ... nor the name of the file being edited


class FimTokens(NamedTuple):
    pre: Optional[int]
    suf: Optional[int]
    mid: Optional[int]
    rep: Optional[int]
    sep: Optional[int]


def fim_tokens(llm) -> FimTokens:
    """The model's FIM tokens (None where its vocabulary has none)."""
    vocab = llm._model.vocab

    def token(read) -> Optional[int]:
        found = read(vocab)
        return None if found == llama_cpp.LLAMA_TOKEN_NULL else int(found)

    return FimTokens(*(token(read) for read in (
        llama_cpp.llama_vocab_fim_pre, llama_cpp.llama_vocab_fim_suf, llama_cpp.llama_vocab_fim_mid,
        llama_cpp.llama_vocab_fim_rep, llama_cpp.llama_vocab_fim_sep,
    )))


def check_fim(llm, model_name: str) -> FimTokens:
    """The model's FIM tokens; a ValueError naming the model and the missing ones where it cannot
    infill."""
    tokens = fim_tokens(llm)
    missing = [name for name, token in (("prefix", tokens.pre), ("suffix", tokens.suf), ("middle", tokens.mid))
               if token is None]
    if missing:
        raise ValueError(f"infill is not supported by the model {model_name}: its vocabulary has no FIM "
                         f"{', '.join(missing)} token{'s' if len(missing) > 1 else ''}")
    return tokens


def infill_prompt(
    llm, fim: FimTokens, prefix: str, suffix: str, prompt: str = "",
    extra: Sequence[tuple[str, str]] = (), n_predict: int = -1, n_batch: int = LLAMA_SERVER_N_BATCH,
) -> list[int]:
    """The prompt's tokens: `extra` is the other files' (filename, text) chunks, oldest first;
    `prompt` is text that goes on from the prefix (llama.vim's part of the cursor's line);
    `n_batch` the server's batch size, which sizes the parts (:func:`fim_budget`)."""

    def tokenize(text: str, special: bool = False) -> list[int]:
        return llm.tokenize(text.encode("utf-8"), add_bos=False, special=special) if text else []

    chunks: list[int] = []
    if fim.rep is not None:
        chunks += [fim.rep, *tokenize(REPO_NAME)]
    for filename, text in extra:
        if fim.sep is not None:
            chunks += [fim.sep, *tokenize(filename + "\n")]
        else:
            chunks += tokenize(CHUNK_SEPARATOR)
        chunks += tokenize(text)
    if fim.sep is not None:
        chunks += [fim.sep, *tokenize(FILE_NAME)]
    middle = tokenize(prompt, special=True)
    budget = fim_budget(n_batch, llm.n_ctx(), n_predict, len(middle))
    before = tokenize(prefix)
    before = before[len(before) - min(len(before), budget.prefix):]
    after = tokenize(suffix)[: budget.suffix]
    n_chunks = min(budget.chunks, len(chunks))
    head = [fim.pre, *before, *middle]
    tail = [fim.suf, *after]
    if getattr(llm, "spm_infill", False):
        head, tail = tail, head
    bos = [llm.token_bos()] if llm._model.add_bos_token() and llm.token_bos() >= 0 else []
    return [*chunks[len(chunks) - n_chunks:], *bos, *head, *tail, fim.mid]
