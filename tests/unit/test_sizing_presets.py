"""The sizes plookup.draft.sizing decides, pinned for the settings people start it with: llama.vim's
FIM preset (`--fim-qwen-1.5b-default`: -b 1024 -ub 1024 -c 0, Qwen2.5-Coder's 32,768 trained
tokens), `plookup serve`'s defaults (-b 2048 as llama-server, -c 4096) and four slots. The figures
are llama-server's own where it has them (format_prompt_infill's split, read from its source)."""

from __future__ import annotations

import pytest

from plookup.app.llama_cli import FIM_VALUES
from plookup.draft.index_drafter import DEFAULT_MAX_DRAFT
from plookup.draft.sizing import (
    LLAMA_SERVER_N_BATCH,
    ContextLayout,
    FimBudget,
    context_layout,
    draft_limit,
    fim_budget,
    room,
)

QWEN_TRAINED_CTX = 32768  # -c 0 on Qwen2.5-Coder
LLAMA_VIM_N_PREDICT = 128  # llama.vim's /infill n_predict


def test_the_fim_presets_settings():
    assert (FIM_VALUES["n_batch"], FIM_VALUES["n_ubatch"], FIM_VALUES["n_ctx"]) == (1024, 1024, 0)
    # a prefix of 3/4 of the batch, a suffix of 1/4 less two and the cursor line's tokens, the
    # other files' chunks in what the context leaves after a batch and twice the tokens to predict
    assert fim_budget(FIM_VALUES["n_batch"], QWEN_TRAINED_CTX, LLAMA_VIM_N_PREDICT, 0) == FimBudget(768, 254, 31488)
    assert fim_budget(1024, QWEN_TRAINED_CTX, LLAMA_VIM_N_PREDICT, 10) == FimBudget(768, 244, 31488)


def test_serves_defaults():
    assert LLAMA_SERVER_N_BATCH == 2048
    assert fim_budget(LLAMA_SERVER_N_BATCH, 4096, LLAMA_VIM_N_PREDICT, 0) == FimBudget(1536, 510, 1792)
    assert fim_budget(LLAMA_SERVER_N_BATCH, 4096, -1, 0) == FimBudget(1536, 510, 2050)  # n_predict -1 as llama-server
    assert fim_budget(2048, 1024, 128, 600) == FimBudget(1536, 0, 0)  # nothing below zero


@pytest.mark.parametrize("parallel, streams, layout", [
    (1, False, ContextLayout(4096, 3, True)),  # one slot: a sequence for a draft's second branch, one for kept cells
    (4, True, ContextLayout(16384, 4, False)),  # -np 4: each slot the whole -c, a KV stream each
    (4, False, ContextLayout(16384, 9, True)),
])
def test_the_context_per_slot(parallel, streams, layout):
    assert context_layout(4096, parallel, streams) == layout


def test_the_longest_draft_a_step_may_verify():
    n_ctx = 4096
    assert room(n_ctx, 100) == 3994 and room(n_ctx, n_ctx - 2) == 0 and room(n_ctx, n_ctx - 1) < 0
    # a lone slot, the preset's batch: the drafter's own bound decides
    assert min(DEFAULT_MAX_DRAFT, draft_limit(room(n_ctx, 100), 1024, 1, 0)) == DEFAULT_MAX_DRAFT
    # four slots decoding and two rows of prompt chunks in a batch of 16
    assert draft_limit(room(n_ctx, 100), 16, 4, 2) == 10
    # a caller that takes 5 more tokens: a step emits accepted + 1, so 4 drafted at most
    assert draft_limit(room(n_ctx, 100), 1024, 1, 0, tokens_left=5) == 4
    # the request's speculative.n_max, and the context's end
    assert draft_limit(room(n_ctx, 100), 1024, 1, 0, n_max=3) == 3
    assert draft_limit(room(n_ctx, n_ctx - 10), 1024, 1, 0) == 8
