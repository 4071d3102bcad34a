"""The acceptance rule: which tokens a verify batch emits. A pure function of the draft and two callbacks.

A verify step decodes, in one ``llama_decode``, the pending token and the draft (and, when the draft
carries a :class:`~plookup.draft.values.Branch`, the branch's tokens on a second sequence). Batch row r
holds the target's distribution after the tokens up to r on its sequence, in this order
(:func:`plookup.verify.rows.verify_rows` fills it):

    rows 0 .. len(draft)                  after pending + draft[:r]
    rows len(draft) + 1 + j               after pending + draft[:at] + branch[:j + 1]

Walk along the draft, sampling each row once:

    for i, x in enumerate(path):
        y = sample(row of path[:i])     # the target's token at this position
        emit y
        if y != x: break                # first disagreement: the rest of the draft is void
    else:
        emit sample(row of path)        # all accepted: one more token for free

For greedy sampling that is "the longest draft prefix equal to the argmax, plus the target's next
token". For temperature > 0 it is Leviathan et al.'s rejection rule with a point-mass draft
q = δ_x: accept x with probability min(1, p(x)/q(x)) = p(x), i.e. exactly when a sample y ~ p
equals x; on rejection the residual norm(max(0, p - q)) is p restricted to y ≠ x, which is what y
already is. With a branch the path switches to the fork when the target's token at ``at`` is the
branch's first token (the draft's own token there differs); each position is still sampled once,
so the rule stays exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

# sample(row) -> (token, was it the most likely token?); None for "not sampled at random" (greedy).
Sample = Callable[[int], "tuple[int, Optional[bool]]"]
# stop(prefix, row) -> did a stopping criterion fire? `prefix`: the path verified before the row.
Stop = Callable[[Sequence[int], int], bool]


@dataclass(frozen=True)
class Verdict:
    tokens: tuple[int, ...]  # emitted: the accepted prefix of the path, then the target's own token
    stopped: bool  # a stopping criterion fired; like llama_cpp, the token that tripped it is dropped
    branch_taken: bool  # the path was the draft's fork, not the draft
    samples: int = 0  # tokens sampled at random (temperature > 0) ...
    most_likely: int = 0  # ... of which the model's most likely one: the policy learns from both
    # the batch row (from the step's first) each of `tokens` was sampled from: its logprobs' row
    rows: tuple[int, ...] = ()

    @property
    def accepted(self) -> int:
        """Draft tokens the target agreed with."""
        return len(self.tokens) if self.stopped else len(self.tokens) - 1


def accept(draft: Sequence[int], sample: Sample, stop: Optional[Stop] = None, branch=None) -> Verdict:
    """Walk the batch rows of `draft` (and of ``branch``, a :class:`~plookup.draft.values.Branch`)."""
    path, rows = list(draft), range(len(draft) + 1)  # rows[i]: the row after path[:i]
    tokens: list[int] = []
    chosen: list[int] = []  # the row of each token
    samples = most_likely = 0
    branch_taken = False
    i = 0
    while True:
        token, likely = sample(rows[i])
        if likely is not None:
            samples += 1
            most_likely += likely
        if stop is not None and stop(path[:i], rows[i]):
            return Verdict(tuple(tokens), True, branch_taken, samples, most_likely, tuple(chosen))
        tokens.append(token)
        chosen.append(rows[i])
        if branch is not None and i == branch.at and len(branch.tokens) and token == branch.tokens[0]:
            path = [*path[:i], *map(int, branch.tokens)]
            rows = [*rows[: i + 1], *range(len(draft) + 1, len(draft) + 1 + len(branch.tokens))]
            branch_taken = True
        if i == len(path) or token != path[i]:
            break  # y != x: the draft is rejected from here on, y is the correction
        i += 1
    return Verdict(tuple(tokens), False, branch_taken, samples, most_likely, tuple(chosen))
