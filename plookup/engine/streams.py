"""Draft sizing where every slot has a KV stream of its own (the engine's layout with several slots).

With a stream per sequence, each row attends over its own sequence's cells only (a unified cache
makes every row walk every slot's cells, masked): measured on this repository's 2-core machine,
Qwen2.5-Coder-0.5B Q8_0, 8 slots decoding plainly, a step of 8 rows took 104-117 ms against 141
ms in one unified cache (free text), and copy-heavy work ran 31.6-33.4 s against 42-43 s. But
uneven drafts cost more there than their rows: see :func:`streams_step_cost`.
"""

from __future__ import annotations

import numpy as np

from ..draft.policy import validate_cost_curve
from ..native.draft_length import batch_cost


def streams_step_cost(rows: list[int], cost: np.ndarray) -> float:
    """What a step costs in a cache with a KV stream per sequence, `rows[i]` rows on sequence i.

    llama.cpp splits such a batch into ubatches that take as many rows from every sequence still
    in it (an "equal split"): with the counts sorted r_1 <= ... <= r_m, ubatch j takes
    ``r_j - r_{j-1}`` rows from each of the m - j + 1 sequences with r >= r_j, so

        cost = sum_j cost((m - j + 1) * (r_j - r_{j-1}))    over the distinct counts

    (measured, Qwen 0.5B Q8_0 on 2 cores, single decodes: 4 slots of 1, 5, 9, 1 rows 9.0, the
    formula 8.7; of 1, 1, 13, 1 rows 7.3, the formula 7.9; of 4 rows each 6.4, the formula 6.7;
    in a unified cache all three cost 6.6-6.8)."""
    total, below = 0.0, 0
    counts = sorted(r for r in rows if r > 0)
    for j, r in enumerate(counts):
        if r > below:
            total += float(batch_cost((len(counts) - j) * (r - below), cost))
            below = r
    return total


def size_streams(probabilities: list[np.ndarray], cost: np.ndarray, max_rows: int) -> list[int]:
    """Draft lengths for sequences verified in one step of a cache with a stream per sequence,
    where uneven drafts split the step into several ubatches (:func:`streams_step_cost`).

    Considered: no draft; and for each length n, the k slots whose first n tokens are likeliest
    accepted drafting n each (k = 1..m; two ubatches, one when every slot drafts). The best expected
    tokens per cost wins; a slot can only draft what its candidate holds (``len(p)`` tokens)."""
    cost = validate_cost_curve(cost)
    m = len(probabilities)
    best, best_rate = [0] * m, m / streams_step_cost([1] * m, cost)
    longest = max((len(p) for p in probabilities), default=0)
    for n in range(1, longest + 1):
        able = [i for i, p in enumerate(probabilities) if len(p) >= n]
        gains = sorted(((float(np.sum(probabilities[i][:n])), i) for i in able), reverse=True)
        expected = float(m)
        for k, (gain, i) in enumerate(gains, start=1):
            if m + k * n > max_rows:
                break
            expected += gain
            rate = expected / streams_step_cost([1 + n] * k + [1] * (m - k), cost)
            if rate > best_rate:
                best_rate = rate
                best = [0] * m
                for _, j in gains[:k]:
                    best[j] = n
    return best
