"""The draft-length oracle's definition, searched exhaustively: the reference the bench's oracle is checked against."""

from __future__ import annotations

import functools

from plookup.app.bench.replay import accepted_length, step_cost


def brute_force_least_cost(candidates, output, cost):
    """The oracle's definition, searched exhaustively: every d <= accepted, every padding."""

    @functools.cache
    def least(pos):
        if pos >= len(output):
            return 0.0
        tokens = candidates.get(pos, [])
        a = accepted_length(tokens, output[pos:])
        return min(min(step_cost(k, cost) for k in range(d, max(d, len(tokens)) + 1)) + least(pos + d + 1)
                   for d in range(a + 1))

    return least(0)
