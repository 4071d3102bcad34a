"""`plookup corpus build PATH... -o FILE [-m MODEL]`: index files for drafting (see plookup.index.corpus)."""

from __future__ import annotations

import argparse
import os
import sys

from ..index.corpus_build import build_corpus
from ..index.corpus_files import DEFAULT_MAX_FILE_BYTES
from .models import resolve_model

PROGRESS_FROM = 200  # files: fewer are done before a bar is worth drawing


def register(commands) -> None:
    corpus = commands.add_parser("corpus", help="index files, folders and globs to draft from")
    actions = corpus.add_subparsers(dest="action", required=True)
    build = actions.add_parser(
        "build", help="tokenize files with a model's tokenizer into a corpus index",
        description="Index files, folders and globs (skipping binaries, what .gitignore excludes and "
                    "files over --max-file-bytes) with MODEL's tokenizer into FILE.",
    )
    build.add_argument("paths", nargs="+", metavar="PATH", help="files, folders, globs ('src/**/*.py')")
    build.add_argument("-o", "--output", required=True, metavar="FILE", help="the index file to write")
    build.add_argument("-m", "--model", metavar="MODEL",
                       help="GGUF file or model name whose tokenizer to use (default: the bundled SmolLM2)")
    build.add_argument("--max-file-bytes", type=int, default=DEFAULT_MAX_FILE_BYTES,
                       help=f"skip larger files (default {DEFAULT_MAX_FILE_BYTES})")
    build.set_defaults(func=cmd_build)


def _progress_bar():
    """A progress callback on stderr for large trees: tqdm's bar where installed, else a counter."""
    state = {}

    def progress(done: int, total: int, path) -> None:
        if total < PROGRESS_FROM:
            return
        if "bar" not in state:
            try:
                from tqdm import tqdm

                state["bar"] = tqdm(total=total, unit="file", file=sys.stderr, leave=False)
            except ImportError:
                state["bar"] = None
        bar = state["bar"]
        if bar is not None:
            bar.update(1)
            if done == total:
                bar.close()
        elif done % 100 == 0 or done == total:
            end = "\n" if done == total else ""
            print(f"\rplookup corpus: {done}/{total} files", end=end, file=sys.stderr, flush=True)

    return progress


def cmd_build(args: argparse.Namespace) -> int:
    index, report = build_corpus(args.paths, resolve_model(args.model), args.max_file_bytes, _progress_bar())
    index.save(args.output)
    print(report.summary(args.output, os.path.getsize(args.output)))
    return 0
