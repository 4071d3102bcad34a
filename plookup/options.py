"""The model and drafter options that `plookup generate`, `bench` and `serve` share, and the model
they load from them."""

from __future__ import annotations

import argparse
import os

from .drafters import DEFAULT_MAX_DRAFT, DRAFTERS, make_drafter
from .models import resolve_model


def add_model_options(parser: argparse.ArgumentParser) -> None:
    """Options every subcommand that loads a model shares."""
    parser.add_argument(
        "-m", "--model", metavar="MODEL",
        help="GGUF file, or a name of `plookup models list` (e.g. qwen-coder-0.5b:q8_0), fetched on "
             "first use (default: the bundled SmolLM2-135M)",
    )  # fmt: skip
    parser.add_argument("--n-ctx", type=int, default=4096, help="context window in tokens (default 4096)")
    parser.add_argument(
        "--threads", type=int, default=os.cpu_count(),
        help="threads for single-token and batched decoding alike (default: all cores)",
    )  # fmt: skip
    parser.add_argument(
        "--max-draft", type=int, default=DEFAULT_MAX_DRAFT,
        help=f"most draft tokens per step (default {DEFAULT_MAX_DRAFT})",
    )  # fmt: skip


def add_drafter_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--drafter", choices=list(DRAFTERS), default="suffix")


def model_kwargs(args: argparse.Namespace) -> dict:
    return dict(
        model_path=resolve_model(args.model),
        n_ctx=args.n_ctx,
        n_threads=args.threads,
        n_threads_batch=args.threads,
        verbose=False,
    )


def load_llama(args: argparse.Namespace, speculative: bool = True):
    """plookup.Llama, or llama_cpp.Llama when speculation is off."""
    if speculative:
        from .decoder import Llama

        return Llama(drafter=make_drafter(args.drafter, max_draft=args.max_draft), **model_kwargs(args))
    import llama_cpp

    return llama_cpp.Llama(**model_kwargs(args))
