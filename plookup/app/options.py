"""The model and drafter options that `plookup generate`, `bench` and `serve` share, and the model
they load from them."""

from __future__ import annotations

import argparse
import glob
import os
import sys
from typing import Optional

from ..api.load import AUTO_GPU_LAYERS
from ..draft.drafters import DRAFTERS, make_drafter
from ..draft.index_drafter import DEFAULT_MAX_DRAFT
from ..draft.sizing import LLAMA_CPP_N_BATCH, LLAMA_SERVER_N_BATCH
from ..index.memory import DEFAULT_MEMORY_TOKENS, GlobalMemory, vocabulary_id
from . import llama_cli
from .models import resolve_model


def add_model_options(parser: argparse.ArgumentParser) -> None:
    """Options every subcommand that loads a model shares, spelled as plookup spells them and as
    llama.cpp's tools do (plookup.app.llama_cli)."""
    parser.add_argument(
        "-m", "--model", metavar="MODEL",
        help="GGUF file, or a name of `plookup models list` (e.g. qwen-coder-0.5b:q8_0), fetched on "
             "first use (default: the bundled SmolLM2-135M)",
    )
    parser.add_argument(
        "-c", "--ctx-size", "--n-ctx", dest="n_ctx", type=llama_cli.ctx_size, default=4096, metavar="N",
        help="context window in tokens, each slot's whole (llama-server shares its -c among its slots) "
             "(default 4096; 0: the context the model was trained with)",
    )
    parser.add_argument(
        "-t", "--threads", type=llama_cli.threads, default=os.cpu_count(), metavar="N",
        help="threads for single-token decoding, and batched unless -tb (default: all cores)",
    )
    parser.add_argument("-tb", "--threads-batch", type=llama_cli.threads, metavar="N",
                        help="threads for batched decoding: prompts, verify batches (default: --threads)")
    parser.add_argument(
        "-ngl", "--n-gpu-layers", "--gpu-layers", dest="n_gpu_layers", type=llama_cli.gpu_layers,
        default=AUTO_GPU_LAYERS, metavar="N|auto|all",
        help="layers on the GPU, as llama-server's -ngl (default auto: every layer where this llama.cpp "
             "build has a GPU backend, e.g. `make GPU=cuda`; none on a CPU build)",
    )
    parser.add_argument("-b", "--batch-size", dest="n_batch", type=llama_cli.positive, metavar="N",
                        help=f"llama.cpp's logical batch: the most tokens a decode takes (default: serve "
                             f"{LLAMA_SERVER_N_BATCH}, as llama-server; the others {LLAMA_CPP_N_BATCH}, llama_cpp's)")
    parser.add_argument("-ub", "--ubatch-size", dest="n_ubatch", type=llama_cli.positive, metavar="N",
                        help=f"llama.cpp's physical batch, at most -b (default {LLAMA_CPP_N_BATCH})")
    parser.add_argument(
        "--max-draft", "--draft-max", "--draft", "--draft-n", "--spec-draft-n-max", "--spec-ngram-mod-n-max",
        dest="max_draft", type=llama_cli.non_negative, default=DEFAULT_MAX_DRAFT, metavar="N",
        help=f"most draft tokens per step, 0 for none (default {DEFAULT_MAX_DRAFT})",
    )
    parser.add_argument(
        "-fa", "--flash-attn", type=llama_cli.flash_attn, nargs="?", const="on", metavar="on|off|auto",
        help="llama.cpp's flash attention; alone: on; auto: what `plookup doctor` chose for the model, else "
             "llama.cpp's own choice, as llama-server's (on where the backend has the kernel) (default: auto for "
             "serve, as llama-server; else the doctor's choice, else llama_cpp's off)",
    )
    parser.add_argument("-ctk", "--cache-type-k", dest="type_k", type=llama_cli.cache_type, metavar="TYPE",
                        help=f"KV cache type of K: {', '.join(llama_cli.CACHE_TYPES)} (default f16)")
    parser.add_argument("-ctv", "--cache-type-v", dest="type_v", type=llama_cli.cache_type, metavar="TYPE",
                        help="KV cache type of V, as -ctk (default f16)")
    parser.add_argument("--mlock", dest="use_mlock", action="store_true", help="keep the model in RAM (mlock)")
    parser.add_argument("--mmap", dest="use_mmap", action=argparse.BooleanOptionalAction,
                        help="map the model file into memory (default: mmap)")
    parser.add_argument(
        "--rpc", metavar="HOST:PORT,...",
        help="put the model's layers on these llama.cpp RPC servers (`plookup rpc-server` on each "
             "host), as llama.cpp's --rpc; one that cannot be used is an error naming it",
    )
    parser.add_argument("-q", "--quiet", "--log-disable", dest="quiet", action="store_true",
                        help="no line per start-up phase on stderr (loading, kernels, measurements: plookup.log)")
    parser.add_argument(
        "--backend-sampling", choices=("on", "off"), nargs="?", const="on",
        help="sample greedy rows inside llama.cpp's graph, reading token ids instead of logits "
             "(default: what `plookup doctor` found faster for the model, else off)",
    )


def add_drafter_option(parser: argparse.ArgumentParser, memory_by_default: bool = False) -> None:
    """The drafter's options; `memory_by_default`: a cross-request memory held in memory unless
    ``--no-memory`` (a server's requests repeat and iterate on earlier ones)."""
    parser.add_argument("--drafter", choices=list(DRAFTERS), default="suffix")
    if memory_by_default:
        parser.add_argument(
            "--memory", metavar="PATH",
            help="keep the cross-request memory (on by default: drafts also from earlier requests) in "
                 "PATH: loaded at start when present, saved there (owner-only) on a clean exit",
        )
        parser.add_argument("--no-memory", action="store_true",
                            help="draft from each request's own text only, not from earlier requests")
    else:
        parser.add_argument(
            "--memory", metavar="PATH",
            help="cross-request memory (suffix drafter): drafts also from earlier requests; loaded from "
                 "PATH at start when present, saved there (owner-only) on a clean exit",
        )
    parser.set_defaults(memory_by_default=memory_by_default)
    parser.add_argument(
        "--corpus", metavar="FILE",
        help="also draft from a corpus of your files (suffix drafter): the one index file that "
             "`plookup corpus build PATH... -o FILE -m MODEL` wrote for this model (build one file "
             "from every folder you want in it); refused when built for another model",
    )
    parser.add_argument(
        "--memory-tokens", type=int, metavar="N",
        help=f"the memory's bound in tokens, oldest requests dropped first (default: the file's, "
             f"else {DEFAULT_MEMORY_TOKENS})",
    )


def model_kwargs(args: argparse.Namespace) -> dict:
    """llama_cpp.Llama's arguments (and plookup.Llama's own) from the model options; n_gpu_layers
    as given ("auto" by default), which plookup.Llama resolves and :func:`plain_llama` too."""
    path = resolve_model(args.model)
    kwargs = dict(
        model_path=path,
        n_ctx=args.n_ctx or llama_cli.trained_context(path),  # -c 0, llama-server's "the model's"
        n_threads=args.threads,
        n_threads_batch=getattr(args, "threads_batch", None) or args.threads,
        n_gpu_layers=getattr(args, "n_gpu_layers", AUTO_GPU_LAYERS),
        verbose=False,
    )
    for name in ("n_batch", "n_ubatch", "type_k", "type_v", "use_mmap"):  # else llama_cpp's defaults
        if getattr(args, name, None) is not None:
            kwargs[name] = getattr(args, name)
    if getattr(args, "use_mlock", False):
        kwargs["use_mlock"] = True
    if getattr(args, "flash_attn", None) in ("on", "off"):
        kwargs["flash_attn"] = args.flash_attn == "on"
    elif getattr(args, "flash_attn", None) == "auto":  # the doctor's choice, else llama.cpp's (plookup.Llama)
        kwargs["flash_attn"] = "auto"
    if getattr(args, "backend_sampling", None) is not None:  # plookup.Llama's own (see llama_cpp_kwargs)
        kwargs["backend_sampling"] = args.backend_sampling == "on"
    if getattr(args, "rpc", None):
        from ..api.rpc_check import parse_servers

        kwargs["rpc_servers"] = parse_servers(args.rpc)
    return kwargs


def llama_cpp_kwargs(kwargs: dict) -> dict:
    """:func:`model_kwargs` for a llama_cpp.Llama: without plookup.Llama's own options (and
    rpc_servers, which llama_cpp.Llama ignores: :func:`plain_llama` applies it), n_gpu_layers a
    count (llama_cpp takes no "auto")."""
    from ..api.load import gpu_layers

    kept = {k: v for k, v in kwargs.items() if k not in ("backend_sampling", "rpc_servers")}
    if kept.get("flash_attn") == "auto":  # llama_cpp.Llama takes a bool: on, what llama.cpp's auto
        kept["flash_attn"] = True  # resolves to wherever the backend has the kernel (CPU, CUDA, Metal)
    kept["n_gpu_layers"] = gpu_layers(kwargs.get("n_gpu_layers", AUTO_GPU_LAYERS), bool(kwargs.get("rpc_servers")))
    return kept


def plain_llama(kwargs: dict, **extra):
    """llama_cpp.Llama from :func:`model_kwargs` (and `extra`), its layers on ``rpc_servers`` if
    given."""
    import llama_cpp

    servers = kwargs.get("rpc_servers")
    if servers:
        from ..api.rpc import load_over_rpc

        return load_over_rpc(llama_cpp.Llama, servers, **llama_cpp_kwargs(kwargs), **extra)
    return llama_cpp.Llama(**llama_cpp_kwargs(kwargs), **extra)


def layers_line(kwargs: dict) -> str:
    """Where a load with :func:`model_kwargs` `kwargs` puts the model's layers, in one line, its
    layers counted from the file's header (no load)."""
    from ..api.load import layers_placed

    total = (llama_cli.model_shape(kwargs["model_path"])["block_count"] or 0) + 1
    return layers_placed(total, kwargs.get("n_gpu_layers", AUTO_GPU_LAYERS), kwargs.get("rpc_servers"))


def load_llama(args: argparse.Namespace, speculative: bool = True, parallel: int = 1, decode_thread=None,
               calibration: str = "blocking"):
    """plookup.Llama (with `parallel` slots; `decode_thread`, `calibration`: see plookup.Llama, or
    "none": nothing measured, :data:`plookup.api.measured.NOTHING_MEASURED`), or llama_cpp.Llama
    when speculation is off."""
    kwargs = model_kwargs(args)
    if speculative:
        from ..api.llama import Llama
        from ..api.measured import NOTHING_MEASURED

        if calibration == "none":
            kwargs.update(NOTHING_MEASURED)
            calibration = "blocking"  # which then has nothing to measure
        memory = open_memory(args, kwargs["model_path"])
        return Llama(drafter=make_drafter(args.drafter, args.max_draft, memory), parallel=parallel,
                     decode_thread=decode_thread, corpus=getattr(args, "corpus", None), calibration=calibration, **kwargs)
    return plain_llama(kwargs)


def open_memory(args: argparse.Namespace, model_path: str) -> Optional[GlobalMemory]:
    """The memory of ``--memory``: loaded when its file is there, else empty; without ``--memory``,
    an empty one where the command keeps one by default (the suffix drafter's, unless
    ``--no-memory``). A corrupt file, or one of another model's vocabulary, is reported and not
    used (a clean exit replaces it)."""
    by_default = getattr(args, "memory_by_default", False)
    path, tokens = getattr(args, "memory", None), getattr(args, "memory_tokens", None)
    if by_default and args.no_memory and (path is not None or tokens is not None):
        raise ValueError("--no-memory turns the memory off: drop --memory and --memory-tokens")
    if tokens is not None and tokens < 1:
        raise ValueError(f"--memory-tokens must be >= 1, got {tokens}")
    if path is None:
        if by_default and not args.no_memory and args.drafter == "suffix":
            return GlobalMemory(tokens or DEFAULT_MEMORY_TOKENS)
        if tokens is not None:
            raise ValueError("--memory-tokens bounds a memory: give its file with --memory PATH")
        return None
    if args.drafter != "suffix":
        raise ValueError("--memory drafts with the suffix drafter (--drafter suffix)")
    if os.path.exists(args.memory):
        try:
            return GlobalMemory.load(args.memory, model_vocabulary(model_path), args.memory_tokens)
        except ValueError as e:
            print(f"plookup: {e}; starting with an empty memory (the file is replaced on a clean exit)",
                  file=sys.stderr)
    return GlobalMemory(args.memory_tokens or DEFAULT_MEMORY_TOKENS)


def save_memory(args: argparse.Namespace, llm, scopes=None) -> None:
    """Keep ``--memory`` for the next run (after a clean exit only: a crash keeps the last file):
    the drafter's own memory in PATH, and a server's other scopes' (plookup.index.scopes) each in
    PATH.SCOPE, owner-readable like it."""
    memory = getattr(llm.drafter, "own_memory", None) if hasattr(llm, "drafter") else None
    if not getattr(args, "memory", None) or memory is None:
        return
    vocabulary = vocabulary_id(llm)
    for scope, kept in scopes.items() if scopes is not None else [("", memory)]:
        kept.save(f"{args.memory}.{scope}" if scope else args.memory, vocabulary)


def load_scopes(args: argparse.Namespace, model_path: str, scopes) -> None:
    """The scopes' memories ``--memory PATH`` kept in PATH.SCOPE files, into `scopes` (a file that
    cannot be used is reported and left out)."""
    if not getattr(args, "memory", None) or scopes is None:
        return
    for path in glob.glob(glob.escape(args.memory) + ".*"):
        scope = path[len(args.memory) + 1:]
        if not scope.isalnum():
            continue
        try:
            scopes.put(scope, GlobalMemory.load(path, model_vocabulary(model_path), args.memory_tokens))
        except ValueError as e:
            print(f"plookup: {e}; that scope starts with an empty memory", file=sys.stderr)


def model_vocabulary(model_path: str) -> str:
    import llama_cpp

    return vocabulary_id(llama_cpp.Llama(model_path, vocab_only=True, verbose=False))
