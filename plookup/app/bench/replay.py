"""Drafting without the model: acceptance and forward passes per token on a recorded output.

Greedy verification keeps the longest draft prefix equal to what the model generates, so given the
model's greedy output, a drafter's verdicts can be computed exactly without running the model (as
llama.cpp's lookup-stats does). This makes drafter changes cheap to try on real workloads.
"""

from __future__ import annotations

import json
from typing import Optional, Sequence

import numpy as np

from ...api.stats import SpecStats
from ...native.draft_length import batch_cost


def accepted_length(draft: Sequence[int], output: Sequence[int]) -> int:
    """How many leading draft tokens equal the output that follows them."""
    n = 0
    for x, y in zip(draft, output):
        if x != y:
            break
        n += 1
    return n


def score_drafts(drafts: Sequence[tuple[int, Sequence[int]]], output: Sequence[int]) -> SpecStats:
    """Stats of a run whose drafts were recorded as (index in the output they predict, tokens).

    Counts the forward pass that produced the first token from the prompt, as SpecStats does for
    plookup's first verify step.
    """
    stats = SpecStats(generated=len(output))
    stats.record_step(0, 0)
    for start, draft in drafts:
        stats.record_step(len(draft), accepted_length(draft, output[start:]))
    return stats


def replay(drafter, prompt: Sequence[int], output: Sequence[int]) -> tuple[SpecStats, list[int]]:
    """Run `drafter` against the recorded greedy `output` of `prompt` as the decoder would.

    A two-branch draft is verified as the decoder does: the fork when the output parts from the
    draft where the fork does, each step costed as one batch of the pending token, the draft and
    the fork's tokens.

    Returns the stats and the tokens each step drafted (both branches), for costing the steps afterwards.
    """
    stats = SpecStats()
    draft_lengths = []
    drafter.sync(np.asarray(prompt, dtype=np.int32))
    pos = 0
    while pos < len(output):
        draft = drafter.propose()
        path, accepted = draft, accepted_length(draft.tokens.tolist(), output[pos:])
        if draft.branch is not None and accepted == draft.branch.at:  # the output may part where the fork does
            path = draft.fork()
            accepted = accepted_length(path.tokens.tolist(), output[pos:])
        stats.record_step(len(path), accepted)
        drafter.observe(path, accepted)
        # The step verifies the pending token, the draft and its fork's own tokens in one batch.
        draft_lengths.append(len(draft) + (len(draft.branch.tokens) if draft.branch is not None else 0))
        emitted = output[pos : pos + accepted + 1]  # the accepted tokens and the model's own next one
        drafter.extend(emitted)
        stats.generated += len(emitted)
        pos += len(emitted)
    return stats, draft_lengths


def best_lengths(drafter, prompt: Sequence[int], output: Sequence[int], cost: np.ndarray) -> list[int]:
    """The draft lengths of the cheapest way to produce `output` with `drafter`'s candidates, chosen
    by an oracle that knows what the model accepts: the bound any draft-length policy can reach.

    At position p the candidate (unsized, as the policy sees it) has L(p) tokens, of which the model
    accepts a(p). A step there may draft any d <= a(p) accepted tokens and emit d + 1; it may pad the
    draft with rejected candidate tokens where a longer batch is cheaper (a measured curve need not
    rise everywhere, and the policy meets the same curve), so it costs c_p(d) = min over
    d <= d' <= L(p) of cost[d']. The least total cost from p on is a shortest path,
        f(p) = min over 0 <= d <= a(p) of c_p(d) + f(p + d + 1),   f(n) = 0,
    over candidates that depend on the text before p only. The policy drafts a prefix of the same
    candidate each step, so its cost is never below f(0) (a second branch aside).
    """
    n = len(output)
    accepted, available = [], []
    drafter.sync(np.asarray(prompt, dtype=np.int32))
    for pos in range(n):
        candidate = drafter.candidate()
        accepted.append(accepted_length(candidate.tokens.tolist(), output[pos:]))
        available.append(len(candidate.tokens))
        drafter.extend(output[pos : pos + 1])
    least = [0.0] * (n + 1)
    step = [(0, 0)] * n  # step[p]: (tokens the cheapest step at p verifies, where the next one starts)
    for pos in range(n - 1, -1, -1):
        options = []
        for d in range(accepted[pos] + 1):
            padded, after = cheapest_length(d, available[pos], cost), min(n, pos + d + 1)
            options.append((step_cost(padded, cost) + least[after], padded, after))
        total, padded, after = min(options)
        least[pos], step[pos] = total, (padded, after)
    lengths, pos = [], 0
    while pos < n:
        padded, pos = step[pos]
        lengths.append(padded)
    return lengths


def cheapest_length(accepted: int, available: int, cost: np.ndarray) -> int:
    """The draft length in [accepted, available] whose verify batch costs least (the shortest of ties)."""
    return min(range(accepted, max(accepted, available) + 1), key=lambda d: step_cost(d, cost))


def step_cost(drafted: int, cost: np.ndarray) -> float:
    """A verify step of `drafted` draft tokens (a batch of drafted + 1), in single-token decodes;
    past the curve's end extrapolated as the draft-length policy does (:func:`batch_cost`)."""
    return float(batch_cost(drafted + 1, np.asarray(cost, dtype=np.float64)))


def modelled_speedup(draft_lengths: Sequence[int], generated: int, cost: np.ndarray) -> float:
    """Tokens per single-token decode if each step of d draft tokens costs cost[d] (a batch of d + 1)."""
    spent = sum(step_cost(d, cost) for d in draft_lengths)
    return generated / spent if spent else 0.0


def replay_speedups(make_drafter, prompt, output, cost: np.ndarray) -> tuple[SpecStats, float, float]:
    """Replay a fresh ``make_drafter()`` on one recorded output, costed with the verify-cost curve.

    Returns the replay's stats, its modelled speedup over plain decoding, and the speedup of the
    same drafter's candidates sized by an oracle (:func:`best_lengths`): how far the draft-length policy is from
    the best it could do with these drafts, beside the always-right ceiling of
    :func:`plookup.measure.costs.oracle_speedup`.
    """
    stats, lengths = replay(make_drafter(), prompt, output)
    oracle_lengths = best_lengths(make_drafter(), prompt, output, cost)
    return (
        stats,
        modelled_speedup(lengths, stats.generated, cost),
        modelled_speedup(oracle_lengths, stats.generated, cost),
    )


def load_recorded(path: str) -> tuple[list[tuple[str, list[int], list[int]]], Optional[np.ndarray]]:
    """(name, prompt tokens, greedy output tokens) cases, and the cost curve when recorded.

    Reads a `plookup bench --json` file (of the single-stream comparison, or of --concurrency: its
    plain batched greedy outputs, the first of each prompt), or JSONL lines of
    {"name"?, "prompt_tokens": [...], "output_tokens": [...]}.
    """
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        run = json.loads(text)
    except json.JSONDecodeError:
        run = None
    if isinstance(run, dict) and "workloads" in run:
        cases = [(w["name"], w["prompt_tokens"], w["reference_tokens"]) for w in run["workloads"]]
        return cases, np.asarray(run["cost_curve"]) if run.get("cost_curve") else None
    if isinstance(run, dict) and "recorded" in run.get("concurrency", {}):  # plain batched's greedy outputs
        recorded = [r for kind in run["concurrency"]["recorded"].values() for r in kind]
        return [(r["name"], r["prompt_tokens"], r["output_tokens"]) for r in recorded], None
    cases = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            cases.append((record.get("name", f"{path}:{lineno}"), record["prompt_tokens"], record["output_tokens"]))
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise ValueError(f"{path}:{lineno}: expected {{'prompt_tokens': [...], 'output_tokens': [...]}}: {e}") from None
    return cases, None
