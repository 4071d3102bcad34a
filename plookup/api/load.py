"""What ``plookup.Llama`` checks and chooses before llama_cpp loads the model, and the drafter it
sets up after: each a step of its ``__init__``.
"""

from __future__ import annotations

import os
import warnings
from typing import Optional

import llama_cpp

from ..draft.index_drafter import check_max_draft
from ..measure.settings import TILED_ENV, model_params, recommended_settings
from . import rpc

GGUF_MAGIC = b"GGUF"


def check_gguf(model_path: str) -> None:
    """Fail early, naming the file, when it is missing or not a GGUF file at all."""
    try:
        with open(model_path, "rb") as f:
            magic = f.read(4)
    except FileNotFoundError:
        raise ValueError(f"model file not found: {model_path}") from None
    except IsADirectoryError:
        raise ValueError(f"model path is a directory, not a GGUF file: {model_path}") from None
    if magic != GGUF_MAGIC:
        raise ValueError(f"not a GGUF file (bad magic {magic!r}): {model_path}")


def check_arguments(model_path: str, max_draft: Optional[int], parallel, exactness, kwargs: dict) -> None:
    """plookup's own arguments, and llama_cpp's that it cannot take as given (`kwargs`, which a
    trimmed sliding-window cache leaves with ``swa_full=True``); then the file."""
    if max_draft is not None:
        check_max_draft(max_draft)
    if isinstance(parallel, bool) or not isinstance(parallel, int) or parallel < 1:
        raise ValueError(f"parallel must be an integer >= 1, got {parallel!r}")
    if exactness not in ("auto", None):
        raise ValueError(f'exactness must be "auto" or None, got {exactness!r}')
    if kwargs.get("draft_model") is not None:
        raise ValueError(
            "plookup.Llama drafts by itself: pass drafter=plookup.SuffixDrafter() instead of "
            "draft_model= (which forces logits_all=True)"
        )
    if kwargs.get("swa_full") is False:
        # A trimmed sliding-window cache cannot roll back rejected draft tokens.
        warnings.warn("plookup.Llama needs swa_full=True to roll back drafts; using it")
        kwargs["swa_full"] = True
    check_gguf(model_path)


def doctor_settings(model_path: str, exactness, use_extra_bufts: Optional[bool], kwargs: dict):
    """(the settings under which ``plookup doctor`` measured verify batches exact, or None; whether
    to repack the weights): their flash attention the default in `kwargs`, their tiling set for
    ggml, unless `exactness` is None."""
    settings = recommended_settings(model_path) if exactness == "auto" else None
    if settings is not None:  # plookup doctor measured verify batches exact with these
        kwargs.setdefault("flash_attn", settings.flash_attn)
        if not settings.tiled:
            os.environ.setdefault(TILED_ENV, "0")  # read by ggml at the process's first matmul
    repack = use_extra_bufts if use_extra_bufts is not None else settings is None or settings.repack
    return settings, repack


def load_model(llm, model_path: str, args, kwargs: dict, repack: bool) -> None:
    """llama_cpp.Llama's loading of `llm`, its layers on the RPC servers that ``rpc_servers`` in
    `kwargs` names, if any (llama_cpp.Llama takes that argument and ignores it)."""
    servers = kwargs.pop("rpc_servers", None)
    llm.rpc_devices = None
    if not servers:
        with model_params(repack):
            llama_cpp.Llama.__init__(llm, model_path, *args, **kwargs)
        return
    with rpc.loading_onto(servers, repack) as devices:
        llama_cpp.Llama.__init__(llm, model_path, *args, **rpc.rpc_kwargs(kwargs))
    rpc.attach(llm, devices)


def set_up_drafter(llm, corpus, streams: bool) -> None:
    """No second branch with a KV stream per slot; the corpus once it is known to be this model's."""
    if streams:
        llm.drafter.branches = False
    if corpus is not None:  # the drafter takes it only once it is known to be this model's
        from ..index.corpus import open_corpus
        from ..index.memory import vocabulary_id

        llm.drafter.use_corpus(open_corpus(corpus, vocabulary_id(llm)))
