"""Building a :class:`plookup.index.corpus.CorpusIndex` from the user's files: each file read and
tokenized (on threads: llama.cpp's tokenizer runs without the GIL), copies dropped, and a report of
what was taken in and left out. A module of its own: the index is the data structure and its file;
this is the one way files (:mod:`plookup.index.corpus_files`) and a tokenizer become one.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import time
from pathlib import Path
from typing import Callable, Iterable, Optional

import numpy as np

from .corpus import EMPTY_TOKENS, CorpusIndex
from .corpus_files import DEFAULT_MAX_FILE_BYTES, collect, read_text
from .memory import vocabulary_id

TOKENIZER_THREADS = 2


@dataclasses.dataclass
class CorpusReport:
    """What a build took in and left out."""

    files: int = 0  # files indexed
    tokens: int = 0
    replaced: int = 0  # files with bytes that are not UTF-8 (now U+FFFD)
    skipped: dict = dataclasses.field(default_factory=dict)  # reason -> paths (also "empty", "duplicate")
    seconds: float = 0.0

    def summary(self, path=None, nbytes: Optional[int] = None) -> str:
        parts = [f"{self.files} files indexed, {self.tokens} tokens"]
        skipped = {r: len(p) for r, p in self.skipped.items() if p}
        if skipped:
            parts.append("skipped " + ", ".join(f"{n} {r}" for r, n in skipped.items()))
        if self.replaced:
            parts.append(f"{self.replaced} with invalid UTF-8 replaced")
        if nbytes is not None:
            per = f" ({nbytes / self.tokens:.2f} per token)" if self.tokens else ""
            parts.append(f"{nbytes} bytes{' in ' + str(path) if path else ''}{per}")
        parts.append(f"{self.seconds:.1f}s")
        return "; ".join(parts)


def _tokenizer(tokenizer) -> tuple[Callable[[bytes], list], str]:
    """(tokenize bytes, vocabulary id) from a llama_cpp.Llama or a GGUF path."""
    if isinstance(tokenizer, (str, Path)):
        import llama_cpp

        tokenizer = llama_cpp.Llama(str(tokenizer), vocab_only=True, verbose=False)
    return (lambda data: tokenizer.tokenize(data, add_bos=False, special=False)), vocabulary_id(tokenizer)


def _read_and_tokenize(path: Path, tokenize) -> tuple[Optional[str], Optional[np.ndarray], bool]:
    """(skip reason or None, tokens, replaced) of one file."""
    try:
        text, replaced = read_text(path)
    except OSError:
        return "unreadable", None, False
    if text is None:
        return "binary", None, False
    tokens = np.asarray(tokenize(text.encode("utf-8")), dtype=np.int32) if text else EMPTY_TOKENS
    return ("empty" if tokens.size == 0 else None), tokens, replaced


def build_corpus(paths: Iterable, tokenizer, max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
                 progress: Optional[Callable[[int, int, Path], None]] = None,
                 threads: int = TOKENIZER_THREADS) -> tuple[CorpusIndex, CorpusReport]:
    """Index the files under `paths` (files, folders, globs; see :mod:`plookup.index.corpus_files`) with
    `tokenizer` (a llama_cpp.Llama, or a GGUF path loaded vocabulary only), on `threads` threads
    (llama.cpp's tokenizer runs without the GIL). ``progress(done, total, path)`` is called as each
    file is done."""
    started = time.perf_counter()
    collected = collect(paths, max_file_bytes)  # a missing path is reported before a model loads
    tokenize, vocabulary = _tokenizer(tokenizer)
    report = CorpusReport(skipped={**collected.skipped, "empty": [], "duplicate": []})
    docs, sources, files, seen = [], [], collected.files, set()
    with concurrent.futures.ThreadPoolExecutor(max(1, threads)) as pool:
        results = pool.map(lambda path: _read_and_tokenize(path, tokenize), files)
        for done, (path, (skip, tokens, replaced)) in enumerate(zip(files, results)):
            if progress is not None:
                progress(done + 1, len(files), path)
            digest = None if skip else hashlib.sha256(tokens).digest()
            if digest in seen:  # a copy adds no string, only counts: the first stands for both
                skip = "duplicate"
            if skip is not None:
                report.skipped[skip].append(path)
                continue
            seen.add(digest)
            docs.append(tokens)
            sources.append(str(path))
            report.replaced += replaced
    index = CorpusIndex.from_documents(docs, vocabulary, sources)
    report.files, report.tokens = len(docs), len(index)
    report.seconds = time.perf_counter() - started
    return index, report
