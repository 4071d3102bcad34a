"""Corpus index speed on a synthetic corpus: build time, bytes per token, lookup microseconds.

    python examples/corpus_speed.py [TOKENS] [--tree FOLDER [-m MODEL]]

The synthetic corpus (default 10M tokens) is Zipf-distributed tokens over a 49k vocabulary with
copies of earlier stretches planted in it (as code repeats itself), cut into files of ~2k tokens.
Lookups are timed on three kinds of context: a stretch of the corpus (long matches), the same with
its last token changed (the match shortens), and fresh Zipf tokens (short, common matches), each
through `CorpusIndex.lookup(context, max_draft=16)`. With --tree, also the build of a real folder,
tokenization included (under the shared lock: it loads a tokenizer).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

from plookup.index.corpus import CorpusIndex
from plookup.index.corpus_build import build_corpus


def synthetic(tokens: int, rng) -> list[np.ndarray]:
    text = np.minimum(rng.zipf(1.2, size=tokens), 49_151).astype(np.int32) - 1
    for _ in range(tokens // 2000):  # plant copies: ~25% of the text repeats an earlier stretch
        size = int(rng.integers(50, 1000))
        source, target = rng.integers(0, tokens - size, size=2)
        text[target : target + size] = text[source : source + size]
    cuts = np.cumsum(rng.integers(500, 3500, size=tokens // 500))
    return np.split(text, cuts[cuts < tokens])


def time_lookups(index: CorpusIndex, contexts: list[np.ndarray]) -> tuple[float, float, float]:
    """(mean µs, p99 µs, mean match length) over `contexts`."""
    for c in contexts[:50]:
        index.lookup(c, 16)
    times, lengths = [], []
    for c in contexts:
        start = time.perf_counter()
        match = index.lookup(c, 16)
        times.append(time.perf_counter() - start)
        lengths.append(match.length)
    us = np.array(times) * 1e6
    return float(us.mean()), float(np.percentile(us, 99)), float(np.mean(lengths))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("tokens", type=int, nargs="?", default=10_000_000)
    parser.add_argument("--tree", help="also build from this folder (tokenization included)")
    parser.add_argument("-m", "--model", default="smollm2")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    docs = synthetic(args.tokens, rng)
    start = time.perf_counter()
    index = CorpusIndex.from_documents(docs)
    build = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "corpus.plc")
        index.save(path)
        size = os.path.getsize(path)
        start = time.perf_counter()
        index = CorpusIndex.load(path)
        load = time.perf_counter() - start
        print(f"{len(index)} tokens, {index.documents} files: suffix array built in {build:.2f}s "
              f"({len(index) / build / 1e6:.2f}M tokens/s), {size / len(index):.2f} bytes per token on disk, "
              f"{index.nbytes / len(index):.2f} in memory, loaded (CRC checked) in {load:.2f}s")
        text = index.text
        starts = rng.integers(0, text.size - 64, size=2000)
        copied = [text[s : s + 48].astype(np.int64) for s in starts if (text[s : s + 48] != 2**31 - 1).all()]
        changed = [np.append(c[:-1], (c[-1] + 17) % 49_152) for c in copied]
        fresh = [np.minimum(rng.zipf(1.2, size=48), 49_151) - 1 for _ in range(2000)]
        for name, contexts in (("corpus stretch", copied), ("last token changed", changed), ("fresh", fresh)):
            mean, p99, length = time_lookups(index, contexts)
            print(f"  lookup, {name:18s}: {mean:6.1f} µs mean, {p99:6.1f} µs p99, match length {length:.1f}")
    if args.tree:
        from plookup.app.models import resolve_model

        index, report = build_corpus([args.tree], resolve_model(args.model))
        print(f"{args.tree}: {report.summary()} -> {report.tokens / report.seconds / 1e6:.2f}M tokens/s "
              "(tokenizer load and tokenization included)")


if __name__ == "__main__":
    main()
