"""How often a corpus could draft: plain greedy outputs that `plookup bench --json` recorded,
replayed against a corpus index, without the model.

    python examples/corpus_replay.py RUN.json CORPUS.idx

For every output position: the longest match of the last 32 tokens in the corpus, by match-length
bucket (the policy's), how often its continuation's first token is the one plain decoding wrote
next and the mean run of right tokens; then the ceiling of drafting from the corpus alone: an oracle
that drafts exactly the right run wherever that pays, under the run's measured verify-cost curve
and under a flat one (memory-bound hardware).
"""

from __future__ import annotations

import json
import sys

import numpy as np

from plookup.draft.policy import CORPUS_PRIOR_HITS, N_BUCKETS, PRIOR_WEIGHT
from plookup.index.corpus import CorpusIndex
from plookup.native.draft_length import length_bucket

CONTEXT = 32


def right_run(corpus: CorpusIndex, history: list[int], future: list[int]) -> tuple[int, int]:
    """(match length, leading corpus continuation tokens equal to `future`)."""
    m = corpus.lookup(np.array(history[-CONTEXT:], np.int32), 16, CONTEXT)
    run = 0
    if m.length >= 2:
        for token in m.tokens.tolist():
            if run < len(future) and future[run] == token:
                run += 1
            else:
                break
    return m.length, run


def group(name: str) -> str:
    return name.split(":", 1)[0]


def main(run_path: str, corpus_path: str) -> None:
    record = json.load(open(run_path, encoding="utf-8"))
    corpus = CorpusIndex.load(corpus_path)
    cost = np.array(record["phases"]["standard"]["cost_curve"])
    buckets: dict[str, dict[int, list]] = {}
    for w in record["workloads"]:
        prompt, out = w["prompt_tokens"], w["reference_tokens"]
        stats = buckets.setdefault(group(w["name"]), {})
        for i in range(len(out)):
            length, run = right_run(corpus, [*prompt, *out[:i]], out[i:])
            s = stats.setdefault(length_bucket(length, N_BUCKETS) if length >= 2 else -1, [0, 0, 0])
            s[0], s[1], s[2] = s[0] + 1, s[1] + (run > 0), s[2] + run
    for name, stats in buckets.items():
        total = sum(s[0] for s in stats.values())
        print(f"{name}: {total} output positions")
        for b in sorted(stats):
            n, first, run = stats[b]
            label = "no match" if b < 0 else f"L {2**b}-{2 ** (b + 1) - 1}"
            extra = "" if b < 0 else (f"  first right {first / n:6.1%}  right run {run / n:.2f}"
                                      f"  (corpus prior {CORPUS_PRIOR_HITS[b] / PRIOR_WEIGHT:.2f})")
            print(f"  {label:<10} {n:5d} ({n / total:5.1%}){extra}")
    for label, curve in (("measured cost curve", cost), ("flat cost curve", np.ones_like(cost))):
        for name in buckets:
            tokens = spent = 0.0
            for w in record["workloads"]:
                if group(w["name"]) != name:
                    continue
                prompt, out, i = w["prompt_tokens"], w["reference_tokens"], 0
                while i < len(out):
                    run = min(right_run(corpus, [*prompt, *out[:i]], out[i:])[1], len(out) - i - 1, len(curve) - 1)
                    if run and (1 + run) / curve[run] <= 1.0:
                        run = 0  # the oracle drafts only where it pays
                    tokens, spent, i = tokens + 1 + run, spent + curve[run], i + 1 + run
            print(f"corpus-only oracle, {label}, {name}: {tokens / spent:.3f}x plain decoding")


if __name__ == "__main__":
    main(*sys.argv[1:3])
