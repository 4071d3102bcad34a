"""The bench's arithmetic: interleaved runs, medians, identity with plain greedy decoding, ratios.

Systems only need ``name`` and ``run(prompt, max_tokens) -> record`` (see plookup.app.bench.systems),
so everything here is tested with fakes.
"""

from __future__ import annotations

import math
import statistics
from typing import Callable, Iterable, Optional, Sequence

from .host import host_microseconds
from .plain import first_divergence

BASELINE = "plain"


def run_interleaved(
    systems: Sequence,
    prompts: dict[str, list[int]],
    max_tokens: int,
    repeats: int,
    on_run: Optional[Callable[[str, str], None]] = None,
) -> dict[str, dict[str, list[dict]]]:
    """runs[system][workload] = one record per repeat.

    Systems take turns on each workload (A B C A B C ...), so a slow drift in machine load
    (another process, thermal throttling) is shared by all of them instead of landing on one.
    """
    runs = {s.name: {w: [] for w in prompts} for s in systems}
    for _ in range(repeats):
        for workload, prompt in prompts.items():
            for system in systems:
                if on_run:
                    on_run(system.name, workload)
                runs[system.name][workload].append(system.run(prompt, max_tokens))
    return runs


def divergence(reference: Sequence[int], gaps: Sequence[float], tokens: Sequence[int]) -> Optional[dict]:
    """None when `tokens` is plain greedy decoding's output, else where it first differs and plain
    decoding's top-2 logit gap there (a small gap means batched rounding, a large one a bug)."""
    if list(tokens) == list(reference):
        return None
    position = first_divergence(reference, tokens)
    if position is None:  # one stopped early: the difference starts where the shorter one ends
        position = min(len(reference), len(tokens))
    return {"position": position, "gap": gaps[position] if position < len(gaps) else None}


def decode_tokens_per_second(record: dict) -> float:
    """Tokens after the first over the time after the first: the speed drafting acts on."""
    seconds = record["total_s"] - record["ttft_s"]
    return (len(record["tokens"]) - 1) / seconds if seconds > 0 else 0.0


def summarize(records: Sequence[dict], reference: Sequence[int], gaps: Sequence[float]) -> dict:
    """Medians of the timings over repeats; counters summed over repeats then averaged per run.

    Counters are not simply copied from one repeat: plookup's policy keeps learning across runs.
    """
    n = len(records)

    def median(key):
        return statistics.median(r[key] for r in records)

    def total(key):
        return sum(r[key] for r in records)

    generated = total("generated")
    draft_steps = sum(r["drafted_per_position"][0] for r in records if r["drafted_per_position"])
    drafted_at, accepted_at = pool_positions(records)
    passes = None if any(r["forward_passes"] is None for r in records) else total("forward_passes")
    diverged = [d for d in (divergence(reference, gaps, r["tokens"]) for r in records) if d]
    rss = [r["peak_rss_mib"] for r in records if r["peak_rss_mib"] is not None]
    timed = all("host_s" in r for r in records)  # in-process systems; a server reports no host time
    return {
        "prefill_s": median("prefill_s"),
        "ttft_s": median("ttft_s"),
        "total_s": median("total_s"),
        "decode_tps": statistics.median(decode_tokens_per_second(r) for r in records),
        "e2e_tps": statistics.median(len(r["tokens"]) / r["total_s"] for r in records),
        "draft_s": median("draft_seconds"),
        "generated": generated / n,
        "drafted": total("drafted") / n,
        "accepted": total("accepted") / n,
        "accepted_from_memory": sum(r.get("accepted_from_memory", 0) for r in records) / n,
        "accepted_from_corpus": sum(r.get("accepted_from_corpus", 0) for r in records) / n,
        "mean_accepted": total("accepted") / draft_steps if draft_steps else 0.0,
        "passes_per_token": passes / generated if passes is not None and generated else None,
        "drafted_per_position": drafted_at,
        "accepted_per_position": accepted_at,
        "peak_rss_mib": max(rss) if rss else None,
        "host_us_per_token": host_microseconds(records, "token") if timed else None,
        "host_us_per_decode": host_microseconds(records, "decode") if timed else None,
        "identical": not diverged,
        "divergence": diverged[0] if diverged else None,
        "tokens": records[0]["tokens"],
    }


def pool_positions(items: Iterable[dict]) -> tuple[list[int], list[int]]:
    """(drafted, accepted) per draft position, summed over runs or summaries."""
    items = list(items)
    n = max((len(i["drafted_per_position"]) for i in items), default=0)

    def pooled(key):
        return [sum(i[key][k] for i in items if k < len(i[key])) for k in range(n)]

    return pooled("drafted_per_position"), pooled("accepted_per_position")


def acceptance_by_position(drafted_at: Sequence[int], accepted_at: Sequence[int]) -> list[float]:
    """P(draft token k accepted | a draft reached position k)."""
    return [a / d if d else 0.0 for a, d in zip(accepted_at, drafted_at)]


def geometric_mean(values: Sequence[float]) -> float:
    values = [v for v in values if v > 0]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else float("nan")


def speedup(summary: dict, system: str, workload: str, key: str = "e2e_tps") -> float:
    """How many times plain decoding's rate (end-to-end or decode tokens per second) a system reaches.

    Rates, not times: after a near-tie flips a token, two systems may stop at different lengths.
    """
    base = summary[BASELINE][workload][key]
    return summary[system][workload][key] / base if base else float("nan")


def pairwise_speedups(summary: dict, workloads: Sequence[str]) -> dict[str, dict[str, float]]:
    """ratio[a][b]: geometric mean over `workloads` of a's end-to-end rate over b's (>1: a faster)."""
    return {
        a: {
            b: geometric_mean([summary[a][w]["e2e_tps"] / summary[b][w]["e2e_tps"] for w in workloads])
            for b in summary
        }
        for a in summary
    }


KIND_ORDER = ("copy", "whole-file", "free")  # the copy-heavy kinds first: the ceiling is about them


def system_overview(summary: dict, kinds: dict[str, str], oracle: float) -> dict[str, dict]:
    """Per system and kind of workload present: geometric-mean speedups over plain (end to end and
    decode) and forward passes per token; and the first copy-heavy kind's decode speedup as a
    fraction of the oracle ceiling."""
    present = [kind for kind in KIND_ORDER if kind in kinds.values()]
    overview = {}
    for system in summary:
        row = {}
        for kind in present:
            names = [w for w, k in kinds.items() if k == kind]
            row[f"{kind}_speedup"] = geometric_mean([speedup(summary, system, w) for w in names])
            row[f"{kind}_decode_speedup"] = geometric_mean(
                [speedup(summary, system, w, "decode_tps") for w in names]
            )
            passes = [summary[system][w].get("passes_per_token") for w in names]
            row[f"{kind}_passes_per_token"] = None if None in passes else sum(passes) / len(passes)
        copying = next((kind for kind in present if kind != "free"), None)
        row["oracle_fraction"] = row[f"{copying}_decode_speedup"] / oracle if copying else float("nan")
        row["identical"] = sum(summary[system][w]["identical"] for w in kinds)
        overview[system] = row
    return overview
