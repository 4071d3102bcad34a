"""Drafting without the model: acceptance and forward passes per token on a recorded output.

Greedy verification keeps the longest draft prefix equal to what the model generates, so given the
model's greedy output, a drafter's verdicts can be computed exactly without running the model (as
llama.cpp's lookup-stats does). This makes drafter changes cheap to try on real workloads.
"""

from __future__ import annotations

import json
from typing import Optional, Sequence

import numpy as np

from ..stats import SpecStats


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


def replay(drafter, prompt: Sequence[int], output: Sequence[int], oracle_length: bool = False) -> tuple[SpecStats, list[int]]:
    """Run `drafter` against the recorded greedy `output` of `prompt` as the decoder would.

    With ``oracle_length`` each step drafts exactly the part of the drafter's candidate
    (``drafter.candidate()``) that the model accepts, as if the draft-length policy knew the
    outcome: the bound any length policy can reach with these candidates.

    Returns the stats and the draft length of every step, for costing the steps afterwards.
    """
    stats = SpecStats()
    draft_lengths = []
    drafter.sync(np.asarray(prompt, dtype=np.int32))
    pos = 0
    while pos < len(output):
        if oracle_length:
            candidate = drafter.candidate()
            draft = candidate.draft(accepted_length(candidate.tokens.tolist(), output[pos:]))
        else:
            draft = drafter.propose()
        accepted = accepted_length(draft.tokens.tolist(), output[pos:])
        stats.record_step(len(draft), accepted)
        drafter.observe(draft, accepted)
        draft_lengths.append(len(draft))
        emitted = output[pos : pos + accepted + 1]  # the accepted tokens and the model's own next one
        drafter.extend(emitted)
        stats.generated += len(emitted)
        pos += len(emitted)
    return stats, draft_lengths


def modelled_speedup(draft_lengths: Sequence[int], generated: int, cost: np.ndarray) -> float:
    """Tokens per single-token decode if each step of d draft tokens costs cost[d] (a batch of d + 1)."""
    last = len(cost) - 1
    spent = sum(float(cost[min(d, last)]) for d in draft_lengths)
    return generated / spent if spent else 0.0


def replay_speedups(make_drafter, prompt, output, cost: np.ndarray) -> tuple[SpecStats, float, float]:
    """Replay a fresh ``make_drafter()`` on one recorded output, costed with the verify-cost curve.

    Returns the replay's stats, its modelled speedup over plain decoding, and the speedup of the
    same drafts sized by an oracle (``oracle_length``): how far the draft-length policy is from
    the best it could do with these drafts, beside the always-right ceiling of
    :func:`plookup.costs.oracle_speedup`.
    """
    stats, lengths = replay(make_drafter(), prompt, output)
    _, oracle_lengths = replay(make_drafter(), prompt, output, oracle_length=True)
    return (
        stats,
        modelled_speedup(lengths, stats.generated, cost),
        modelled_speedup(oracle_lengths, stats.generated, cost),
    )


def load_recorded(path: str) -> tuple[list[tuple[str, list[int], list[int]]], Optional[np.ndarray]]:
    """(name, prompt tokens, greedy output tokens) cases, and the cost curve when recorded.

    Reads a `plookup bench --json` file, or JSONL lines of
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
