"""Several slots' drafts sized together for the step they share: one home for draft sizing.

A step verifies every decoding slot's pending token and draft in one ``llama_decode``; its cost is
the batch's, so the drafts are sized together for the expected tokens per cost of the whole step:
a busy batch drafts less, a full one nothing, and a lone slot drafts what
:meth:`plookup.draft.policy.DraftPolicy.choose` would. Each slot hands its candidate's prefix
probabilities (:meth:`~plookup.draft.policy.DraftPolicy.prefix_probabilities`).

Two layouts of the cache, two step costs:

- one unified cache (:func:`size_batch`): a step of r rows costs cost(r);
- a KV stream per slot (:func:`size_streams`, the engine's layout with several slots): each row
  attends over its own slot's cells only, so a step is cheaper than in one unified cache
  (BENCHMARKS.md, "Figures behind the code's choices"), but uneven drafts cost more there than
  their rows: see :func:`streams_step_cost`.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..native.draft_length import batch_cost, equal_split_cost, size_batch_drafts, size_stream_drafts
from .policy import validate_cost_curve


def probability_table(probabilities: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(table, counts): the slots' prefix probabilities as rows of one array, zero-padded, and
    how many of each row are the slot's (what the numba kernels take)."""
    counts = np.array([len(p) for p in probabilities], dtype=np.int64)
    table = np.zeros((len(probabilities), max(1, int(counts.max(initial=0)))))
    for i, p in enumerate(probabilities):
        table[i, : len(p)] = p
    return table, counts


def size_batch(probabilities: list[np.ndarray], cost: np.ndarray, max_rows: int) -> list[int]:
    """Draft lengths for sequences verified in one batch of at most `max_rows` rows, each with
    its pending token: ``probabilities[i]`` is sequence i's :meth:`DraftPolicy.prefix_probabilities`.
    The lengths maximise expected tokens per cost of the whole step (see
    :func:`plookup.native.draft_length.size_batch_drafts`): a busy batch drafts less, and a lone
    sequence drafts what :meth:`DraftPolicy.choose` would."""
    table, counts = probability_table(probabilities)
    return size_batch_drafts(table, counts, validate_cost_curve(cost), int(max_rows)).tolist()


def sequence_ids(seqs: Optional[list[int]], m: int) -> np.ndarray:
    """The m slots' sequence ids for the kernels: `seqs`, or by default 0, 1, ..., m - 1."""
    return np.asarray(range(m) if seqs is None else seqs, dtype=np.int64)


def streams_step_cost(rows: list[int], cost: np.ndarray, seqs: Optional[list[int]] = None) -> float:
    """What a step costs in a cache with a KV stream per sequence, `rows[i]` rows on sequence
    `seqs[i]` (increasing; by default 0, 1, 2, ...).

    llama.cpp splits such a batch into ubatches that take as many rows from every sequence in
    them (an "equal split") and only consecutive sequences (``llama_batch_allocr::split_equal``):
    see :func:`plookup.native.draft_length.equal_split_cost`. With the counts sorted
    r_1 <= ... <= r_m on consecutive sequences whose longer drafts are neighbours, ubatch j takes
    ``r_j - r_{j-1}`` rows from each of the m - j + 1 sequences with r >= r_j (measured, Qwen 0.5B
    Q8_0 on 2 cores, single decodes: 4 slots of 1, 5, 9, 1 rows 9.0, the formula 8.7; of 1, 1, 13,
    1 rows 7.3, the formula 7.9; of 4 rows each 6.4, the formula 6.7; in a unified cache all three
    cost 6.6-6.8). Two drafts with a sequence between them take a ubatch each."""
    return float(equal_split_cost(np.asarray(rows, dtype=np.int64), sequence_ids(seqs, len(rows)),
                                  validate_cost_curve(cost)))


def gaps_worth_filling(seqs: list[int], cost: np.ndarray) -> list[int]:
    """The idle sequences worth a throwaway row in a step of `seqs` (one row each, in a cache
    with a KV stream per sequence).

    llama.cpp's equal split takes only consecutive sequences into a ubatch
    (``llama_batch_allocr::split_equal``), so an idle sequence between two that step splits their
    rows into two passes over the weights. A row on each idle one between two runs of stepped
    sequences merges them into one pass where that costs less: cost(a + g + b) <= cost(a) +
    cost(b) for runs of a and b rows and a gap of g (measured, Qwen 0.5B Q8_0, 8 slots on 2 cores:
    a step of 7 rows split in two took 165 ms, one of 8 rows in one pass 128 ms). Runs merge from
    the lowest sequence up."""
    stepped = sorted(set(seqs))
    runs: list[list[int]] = []
    for seq in stepped:
        if runs and seq == runs[-1][-1] + 1:
            runs[-1].append(seq)
        else:
            runs.append([seq])
    fill: list[int] = []
    if not runs:
        return fill
    rows = len(runs[0])
    for before, run in zip(runs, runs[1:]):
        gap = list(range(before[-1] + 1, run[0]))
        merged = rows + len(gap) + len(run)
        if batch_cost(merged, cost) <= batch_cost(rows, cost) + batch_cost(len(run), cost):
            fill += gap
            rows = merged
        else:
            rows = len(run)
    return fill


def size_streams(probabilities: list[np.ndarray], cost: np.ndarray, max_rows: int,
                 seqs: Optional[list[int]] = None) -> list[int]:
    """Draft lengths for sequences verified in one step of a cache with a stream per sequence,
    ``probabilities[i]`` on sequence ``seqs[i]`` (increasing; by default 0, 1, 2, ...), where
    uneven drafts, and drafts with a sequence between them, split the step into several ubatches
    (:func:`streams_step_cost`; with idle slots between, the pending rows count as one pass, since
    the step fills those gaps: :func:`plookup.native.draft_length.drafted_step_cost`).

    Considered: no draft; and for each length n, the k slots whose first n tokens are likeliest
    accepted drafting n each (k = 1..m), and each run of neighbouring slots drafting n. The best
    expected tokens per cost wins; a slot can only draft what its candidate holds (``len(p)``
    tokens). The search runs in :func:`plookup.native.draft_length.size_stream_drafts`: with drafts
    of up to 64 tokens it weighs some 64 x m^2 / 2 choices a step, which Python took milliseconds
    to do."""
    table, counts = probability_table(probabilities)
    return size_stream_drafts(table, counts, sequence_ids(seqs, len(probabilities)), validate_cost_curve(cost),
                              int(max_rows)).tolist()
