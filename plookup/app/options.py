"""The model and drafter options that `plookup generate`, `bench` and `serve` share, and the model
they load from them."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Optional

from ..draft.drafters import DRAFTERS, make_drafter
from ..draft.index_drafter import DEFAULT_MAX_DRAFT
from ..index.memory import DEFAULT_MEMORY_TOKENS, GlobalMemory, vocabulary_id
from .models import resolve_model


def add_model_options(parser: argparse.ArgumentParser) -> None:
    """Options every subcommand that loads a model shares."""
    parser.add_argument(
        "-m", "--model", metavar="MODEL",
        help="GGUF file, or a name of `plookup models list` (e.g. qwen-coder-0.5b:q8_0), fetched on "
             "first use (default: the bundled SmolLM2-135M)",
    )
    parser.add_argument("--n-ctx", type=int, default=4096, help="context window in tokens (default 4096)")
    parser.add_argument(
        "--threads", type=int, default=os.cpu_count(),
        help="threads for single-token and batched decoding alike (default: all cores)",
    )
    parser.add_argument(
        "--max-draft", type=int, default=DEFAULT_MAX_DRAFT,
        help=f"most draft tokens per step (default {DEFAULT_MAX_DRAFT})",
    )
    parser.add_argument(
        "--flash-attn", choices=("on", "off"),
        help="llama.cpp's flash attention (default: llama_cpp's, off, unless `plookup doctor` chose "
             "settings for the model; on was 19%% faster on 2 cores with SmolLM2 at 2 slots)",
    )
    parser.add_argument(
        "--rpc", metavar="HOST:PORT,...",
        help="put the model's layers on these llama.cpp RPC servers (`plookup rpc-server` on each "
             "host), as llama.cpp's --rpc; one that cannot be used is an error naming it",
    )
    parser.add_argument(
        "--backend-sampling", choices=("on", "off"),
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
    kwargs = dict(
        model_path=resolve_model(args.model),
        n_ctx=args.n_ctx,
        n_threads=args.threads,
        n_threads_batch=args.threads,
        verbose=False,
    )
    if getattr(args, "flash_attn", None) is not None:  # else the model's own choice (doctor) stands
        kwargs["flash_attn"] = args.flash_attn == "on"
    if getattr(args, "backend_sampling", None) is not None:  # plookup.Llama's own (see llama_cpp_kwargs)
        kwargs["backend_sampling"] = args.backend_sampling == "on"
    if getattr(args, "rpc", None):
        from ..api.rpc_check import parse_servers

        kwargs["rpc_servers"] = parse_servers(args.rpc)
    return kwargs


def llama_cpp_kwargs(kwargs: dict) -> dict:
    """:func:`model_kwargs` for a llama_cpp.Llama: without plookup.Llama's own options (and
    rpc_servers, which llama_cpp.Llama ignores: :func:`plain_llama` applies it)."""
    return {k: v for k, v in kwargs.items() if k not in ("backend_sampling", "rpc_servers")}


def plain_llama(kwargs: dict, **extra):
    """llama_cpp.Llama from :func:`model_kwargs` (and `extra`), its layers on ``rpc_servers`` if
    given."""
    import llama_cpp

    servers = kwargs.get("rpc_servers")
    if servers:
        from ..api.rpc import load_over_rpc

        return load_over_rpc(llama_cpp.Llama, servers, **llama_cpp_kwargs(kwargs), **extra)
    return llama_cpp.Llama(**llama_cpp_kwargs(kwargs), **extra)


def load_llama(args: argparse.Namespace, speculative: bool = True, parallel: int = 1, decode_thread=None):
    """plookup.Llama (with `parallel` slots; `decode_thread`: see plookup.Llama), or
    llama_cpp.Llama when speculation is off."""
    kwargs = model_kwargs(args)
    if speculative:
        from ..api.llama import Llama

        memory = open_memory(args, kwargs["model_path"])
        return Llama(drafter=make_drafter(args.drafter, args.max_draft, memory), parallel=parallel,
                     decode_thread=decode_thread, corpus=getattr(args, "corpus", None), **kwargs)
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


def save_memory(args: argparse.Namespace, llm) -> None:
    """Keep ``--memory`` for the next run (after a clean exit only: a crash keeps the last file)."""
    memory = getattr(llm.drafter, "memory", None) if hasattr(llm, "drafter") else None
    if getattr(args, "memory", None) and memory is not None:
        memory.save(args.memory, vocabulary_id(llm))


def model_vocabulary(model_path: str) -> str:
    import llama_cpp

    return vocabulary_id(llama_cpp.Llama(model_path, vocab_only=True, verbose=False))
