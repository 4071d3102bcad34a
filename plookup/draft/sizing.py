"""Sizing, in one home: what a load and a step decide from the settings and the measured curve.

- the batch's defaults (llama-server's :data:`LLAMA_SERVER_N_BATCH` for ``serve``, llama_cpp's
  :data:`LLAMA_CPP_N_BATCH` elsewhere; llama.cpp clamps a ubatch to the batch);
- the context's cells per slot and in all (:func:`context_layout`);
- the longest draft a generation may verify in a step (:func:`room`, :func:`draft_limit`);
- a FIM prompt's parts (:func:`fim_budget`, llama-server's ``format_prompt_infill``);
- and several slots' drafts sized together for the step they share (below).

A step verifies every decoding slot's pending token and draft in one ``llama_decode``; its cost is
the batch's, so the drafts are sized together for the expected tokens per cost of the whole step:
a busy batch drafts less, a full one nothing, and a lone slot drafts what
:meth:`plookup.draft.policy.DraftPolicy.choose` would. Each slot hands its candidate's prefix
probabilities (:meth:`~plookup.draft.policy.DraftPolicy.prefix_probabilities`).

Two layouts of the cache, two step costs:

- one unified cache (:func:`size_batch`): a step of r rows costs cost(r);
- a KV stream per slot (:func:`size_streams`, the engine's layout with several slots): each row
  attends over its own slot's cells only, so a step is cheaper than in one unified cache
  (docs/lab/notebook.md, "Figures behind the code's choices"), but uneven drafts cost more there than
  their rows: see :func:`streams_step_cost`.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Sequence

import numpy as np

from ..native.draft_length import batch_cost, equal_split_cost, size_batch_drafts, size_stream_drafts
from .policy import validate_cost_curve

# -- the sizes a load decides

LLAMA_SERVER_N_BATCH = 2048  # llama-server's default --batch-size (`plookup serve`'s default too)
LLAMA_CPP_N_BATCH = 512  # llama_cpp.Llama's default n_batch and n_ubatch (plookup.Llama's)


class ContextLayout(NamedTuple):
    n_ctx: int  # cells in the whole cache
    # sequences: one per slot; where unified, one more per slot for a draft's second branch (and
    # a prompt's cached chunks waiting for the tokens before them), and one for the cells a lone
    # slot keeps from an earlier prompt (plookup.engine.reuse)
    n_seq_max: int
    unified: bool  # one cache shared by every sequence; else a KV stream per slot


def context_layout(n_ctx_per_slot: int, parallel: int, streams: bool) -> ContextLayout:
    """The cache for `parallel` slots, each with the whole `n_ctx_per_slot` window (llama-server
    divides its -c among its slots; plookup gives each slot -c): with `streams` a KV stream per
    slot and no branch sequence, else one unified cache where every slot has a second sequence for
    a draft's branch, sharing cells with the first, and one for the cells kept from an earlier prompt."""
    return ContextLayout(parallel * n_ctx_per_slot, parallel if streams else 2 * parallel + 1, not streams)


# -- the longest draft a step may verify


def room(n_ctx: int, n: int) -> int:
    """Draft tokens that fit behind a slot's pending token when its cells hold `n`, so that prompt
    + output stays <= n_ctx, as llama_cpp caps it (the token sampled last is never evaluated); < 0:
    the context is full."""
    return n_ctx - n - 2


def draft_limit(room_left: int, n_batch: int, n_decoding: int, reserve: int,
                tokens_left: Optional[int] = None, n_max: Optional[int] = None) -> int:
    """The longest draft a generation may verify in a step: `room_left` in its context (:func:`room`),
    the batch less a row for each decoding generation's pending token and the `reserve` rows of
    others (prompt chunks, fillers), its caller's `tokens_left` (a step emits accepted + 1), its
    request's `n_max`."""
    limit = min(room_left, n_batch - n_decoding - reserve)
    if tokens_left is not None:
        limit = min(limit, tokens_left - 1)
    if n_max is not None:
        limit = min(limit, n_max)
    return limit


# -- a FIM prompt's parts


class FimBudget(NamedTuple):
    prefix: int  # the most tokens kept of the text before the cursor (its last ones)
    suffix: int  # ... of the text after it (its first ones)
    chunks: int  # ... of the other files' chunks (the newest)


def fim_budget(n_batch: int, n_ctx: int, n_predict: int, n_prompt: int) -> FimBudget:
    """llama-server's split of a FIM prompt (format_prompt_infill): 3/4 of the batch for the prefix,
    1/4 less the prompt's tokens and two for the suffix, and what the slot's context leaves after a
    batch and twice the tokens to predict (-1: none) for the other files' chunks."""
    return FimBudget(3 * (n_batch // 4), max(0, n_batch // 4 - (2 + n_prompt)), max(0, n_ctx - n_batch - 2 * n_predict))


# -- several slots' drafts sized together


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


def fillers_worth_adding(stepped: list[int], idle: list[int], cost: np.ndarray) -> list[int]:
    """The `idle` sequences worth a throwaway row in a step of one row on each of `stepped`, in a
    cache with a KV stream per sequence: those that make the step's passes over the weights
    cheapest, the fewer rows where two choices cost the same.

    llama.cpp's equal split takes only consecutive sequences into a ubatch
    (``llama_batch_allocr::split_equal``), so the rows cost cost(r) for each run of r consecutive
    sequences. A row on an idle sequence between two runs merges them into one pass where
    cost(a + g + b) < cost(a) + cost(b) (measured, Qwen 0.5B Q8_0, 8 slots on 2 cores: a step of 7
    rows split in two took 165 ms, one of 8 rows in one pass 128 ms); one beside a run lengthens
    it, which pays where the curve is not monotone (the same model and machine, decode-only steps
    of 4 slots: 3 rows 57-64 ms, 4 rows 49-52). A sequence neither stepped nor idle (a slot whose
    context is full, a branch sequence) ends a run. Chosen over the sequences in order, keeping for
    each length of the run still open the cheapest choice so far."""
    stepped_set = set(stepped)
    free = set(idle) - stepped_set
    if not stepped_set or not free:
        return []

    def closed(run: int) -> float:
        return float(batch_cost(run, cost)) if run else 0.0

    # open run's length -> (cost of the closed runs, fillers so far), the cheapest, then fewest
    choices: dict[int, tuple[float, tuple[int, ...]]] = {0: (0.0, ())}
    for seq in range(min(stepped_set | free), max(stepped_set | free) + 1):
        after: dict[int, tuple[float, tuple[int, ...]]] = {}

        def keep(run: int, spent: float, fillers: tuple[int, ...]) -> None:
            if run not in after or (spent, len(fillers)) < (after[run][0], len(after[run][1])):
                after[run] = (spent, fillers)

        for run, (spent, fillers) in choices.items():
            if seq in stepped_set:
                keep(run + 1, spent, fillers)
                continue
            keep(0, spent + closed(run), fillers)
            if seq in free:
                keep(run + 1, spent, fillers + (seq,))
        choices = after
    _, _, fillers = min((spent + closed(run), len(fillers), fillers) for run, (spent, fillers) in choices.items())
    return list(fillers)


def size_streams(probabilities: list[np.ndarray], cost: np.ndarray, max_rows: int,
                 seqs: Optional[list[int]] = None, fixed: Sequence[int] = ()) -> list[int]:
    """Draft lengths for sequences verified in one step of a cache with a KV stream per sequence,
    ``probabilities[i]`` on sequence ``seqs[i]`` (increasing; by default 0, 1, 2, ...), where
    uneven drafts, and drafts with a sequence between them, split the step into several ubatches
    (:func:`streams_step_cost`). `fixed`: the other sequences with a row in the step, which yields
    no token (the step's fillers, :func:`fillers_worth_adding`; a prompt chunk, counted as one
    row): the step costs the split of all its rows. `max_rows` bounds them all.

    Considered: no draft; and for each length n, the k slots whose first n tokens are likeliest
    accepted drafting n each (k = 1..m), and each run of neighbouring slots drafting n. The best
    expected tokens per cost wins; a slot can only draft what its candidate holds (``len(p)``
    tokens). The search runs in :func:`plookup.native.draft_length.size_stream_drafts`: with drafts
    of up to 64 tokens it weighs some 64 x m^2 / 2 choices a step, which Python took milliseconds
    to do."""
    own = sequence_ids(seqs, len(probabilities)).tolist()
    everyone = sorted(set(own) | set(fixed))
    where = {seq: i for i, seq in enumerate(everyone)}
    chances = [np.zeros(0)] * len(everyone)
    yields = np.zeros(len(everyone))
    for seq, p in zip(own, probabilities):
        chances[where[seq]] = p
        yields[where[seq]] = 1.0
    table, counts = probability_table(chances)
    lengths = size_stream_drafts(table, counts, np.asarray(everyone, dtype=np.int64), yields,
                                 validate_cost_curve(cost), int(max_rows))
    return [int(lengths[where[seq]]) for seq in own]
