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
from .rpc_check import parse_servers

GGUF_MAGIC = b"GGUF"

# llama-server's default for -ngl: every layer on the GPU where the build has a GPU backend
# (CUDA, Metal, Vulkan, ...), none on a CPU-only build, where -1 would mean the same anyway.
AUTO_GPU_LAYERS = "auto"
# enum ggml_backend_dev_type (ggml-backend.h): CPU, GPU, IGPU, ACCEL
GPU_DEVICE, IGPU_DEVICE = 1, 2


def gpu_layers(value, rpc: bool = False) -> int:
    """llama_model_params.n_gpu_layers for `value`, as llama-server reads ``-ngl``: a count of
    layers (>= 0), ``"all"`` or -1 for every layer, ``"auto"`` for every layer where the build
    can offload (a GPU device in the build), else none; over RPC (`rpc`) every layer, onto the
    servers. A bad value is a ValueError naming it."""
    if isinstance(value, str):
        word = value.strip().lower()
        if word == AUTO_GPU_LAYERS:
            return -1 if rpc or has_gpu_device() else 0
        if word == "all":
            return -1
        try:
            value = int(word)
        except ValueError:
            raise ValueError(f"n_gpu_layers must be a number of layers, 'auto' or 'all', got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, int) or value < -1:
        raise ValueError(f"n_gpu_layers must be a number of layers >= 0, -1 (all), 'auto' or 'all', got {value!r}")
    return value


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


def layers_placed(total: int, wanted, servers=None) -> str:
    """Where a load puts a model of `total` layers (llama.cpp's count: the blocks and the output
    layer) asked for `wanted` (-ngl's value) on this build, e.g. "layers: 25/25 on the GPU (CUDA0)"."""
    count = gpu_layers(wanted, bool(servers))
    placed = total if count < 0 else min(count, total)
    rest = "" if placed == total else ", the rest on the CPU"
    if servers:
        return f"layers: {placed}/{total} on the RPC servers {', '.join(parse_servers(servers))}{rest}"
    device = gpu_device()
    if device is None:
        refused = f" (-ngl {wanted} has nothing to offload to)" if count != 0 else ""
        return f"layers: on the CPU (this llama.cpp build has no GPU backend){refused}"
    name = rpc.ggml().ggml_backend_dev_name(device).decode()
    if placed == 0:
        return f"layers: on the CPU (-ngl 0; the GPU {name} unused)"
    return f"layers: {placed}/{total} on the GPU ({name}){rest}"


def gpu_device():
    """llama.cpp's first GPU (or integrated GPU) device, None on a build without one."""
    llama_cpp.llama_backend_init()  # loads the backends, whose devices ggml then lists
    return next(filter(None, map(rpc.ggml().ggml_backend_dev_by_type, (GPU_DEVICE, IGPU_DEVICE))), None)


def has_gpu_device() -> bool:
    """Whether llama.cpp's build has a GPU (or integrated GPU) device to put layers on.
    ``llama_supports_gpu_offload`` is not it: it also says yes for a build with the RPC backend."""
    return gpu_device() is not None


def check_arguments(model_path: str, max_draft: Optional[int], parallel, exactness, kwargs: dict) -> None:
    """plookup's own arguments, and llama_cpp's that it cannot take as given (`kwargs`, which a
    trimmed sliding-window cache leaves with ``swa_full=True`` and ``n_gpu_layers`` a count:
    "auto" by default, as llama-server's ``-ngl``); then the file."""
    if max_draft is not None:
        check_max_draft(max_draft)
    if isinstance(parallel, bool) or not isinstance(parallel, int) or parallel < 1:
        raise ValueError(f"parallel must be an integer >= 1, got {parallel!r}")
    if exactness not in ("auto", None):
        raise ValueError(f'exactness must be "auto" or None, got {exactness!r}')
    if kwargs.get("flash_attn", False) not in (True, False, "auto"):
        raise ValueError(f'flash_attn must be True, False or "auto", got {kwargs["flash_attn"]!r}')
    if kwargs.get("draft_model") is not None:
        raise ValueError(
            "plookup.Llama drafts by itself: pass drafter=plookup.SuffixDrafter() instead of "
            "draft_model= (which forces logits_all=True)"
        )
    if kwargs.get("swa_full") is False:
        # A trimmed sliding-window cache cannot roll back rejected draft tokens.
        warnings.warn("plookup.Llama needs swa_full=True to roll back drafts; using it")
        kwargs["swa_full"] = True
    kwargs["n_gpu_layers"] = gpu_layers(kwargs.get("n_gpu_layers", AUTO_GPU_LAYERS), bool(kwargs.get("rpc_servers")))
    check_gguf(model_path)


def doctor_settings(model_path: str, exactness, use_extra_bufts: Optional[bool], kwargs: dict):
    """(the settings under which ``plookup doctor`` measured verify batches exact, or None; whether
    to repack the weights): their flash attention in `kwargs` where it gives none or "auto", their
    tiling set for ggml, unless `exactness` is None."""
    settings = recommended_settings(model_path) if exactness == "auto" else None
    if settings is not None:  # plookup doctor measured verify batches exact with these
        if kwargs.get("flash_attn", "auto") == "auto":
            kwargs["flash_attn"] = settings.flash_attn
        if not settings.tiled:
            os.environ.setdefault(TILED_ENV, "0")  # read by ggml at the process's first matmul
    repack = use_extra_bufts if use_extra_bufts is not None else settings is None or settings.repack
    return settings, repack


def load_model(llm, model_path: str, args, kwargs: dict, repack: bool) -> None:
    """llama_cpp.Llama's loading of `llm`, its layers on the RPC servers that ``rpc_servers`` in
    `kwargs` names, if any (llama_cpp.Llama takes that argument and ignores it). With
    ``flash_attn="auto"``, llama.cpp's own choice, as llama-server's ``-fa auto``: llama_cpp.Llama
    takes a bool, so its context is made without, and the engine's context
    (:func:`plookup.api.context.recreate_context`) with LLAMA_FLASH_ATTN_TYPE_AUTO."""
    auto_flash = kwargs.get("flash_attn") == "auto"
    if auto_flash:
        kwargs["flash_attn"] = False
    _load(llm, model_path, args, kwargs, repack)
    if auto_flash:
        llm.context_params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO


def _load(llm, model_path: str, args, kwargs: dict, repack: bool) -> None:
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
