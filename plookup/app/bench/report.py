"""What `plookup bench` shows: a progress bar while it runs, then terminal tables and a chart."""

from __future__ import annotations

import sys
import time
from typing import Sequence

from ..tables import grid
from .host import PARTS
from .measure import acceptance_by_position, pool_positions, speedup

PLOTTED_POSITIONS = 16


class Progress:
    """A one-line progress bar on stderr, with the time left at the rate so far."""

    def __init__(self, total: int, stream=None, width: int = 30):
        self.total, self.done, self.width = total, 0, width
        self.stream = stream or sys.stderr
        self.start = time.monotonic()

    def step(self, label: str) -> None:
        elapsed = time.monotonic() - self.start
        left = elapsed / self.done * (self.total - self.done) if self.done else 0.0
        filled = self.width * self.done // max(1, self.total)
        bar = "#" * filled + "-" * (self.width - filled)
        self.stream.write(f"\r[{bar}] {self.done}/{self.total} ~{left:4.0f}s left  {label[:48]:<48}")
        self.stream.flush()
        self.done += 1

    def finish(self) -> None:
        self.stream.write(f"\r{' ' * (self.width + 80)}\r")
        self.stream.flush()


def copy_heavy(kinds: dict[str, str]) -> list[str]:
    """The workloads whose output repeats the input: copy and whole-file edits."""
    return [w for w, k in kinds.items() if k != "free"]


def print_results(summary, kinds, cost, oracle, overview, pairs, bounds, drafter_us) -> None:
    """Every table of a bench run, in reading order. ``oracle``: (best n, ceiling)."""
    best_n, ceiling = oracle
    copy = copy_heavy(kinds)
    print(workload_table(summary, kinds))
    print(f"\nverify cost of n tokens / 1 token: {' '.join(f'{c:.2f}' for c in cost)}")
    print(f"oracle ceiling: {ceiling:.2f}x plain decoding (always-right drafter verifying {best_n} tokens a step)\n")
    print(overview_table(overview, len(kinds)))
    print("\nend-to-end speedup, row over column (geometric mean over all workloads):")
    print(pairwise_table(pairs))
    if bounds:
        print("\nthe drafters replayed on plain decoding's copy outputs, speed modelled by the cost curve:")
        for name, bound in bounds.items():
            print(f"  {name:8s} {bound['modelled']:.2f}x as sized by plookup's policy, "
                  f"{bound['oracle_length']:.2f}x sized by an oracle that knows how many are accepted")
    print("\nhost time outside llama_decode (median over runs, workloads pooled by kind), "
          "us per generated token | per decode:")
    print(host_table(summary, kinds))
    print("\nacceptance by draft position, copy-heavy workloads:")
    print("\n".join(acceptance_lines(summary, copy)))
    print("\ndrafter time per step (extend 1 token + propose), by tokens indexed:")
    for name, by_size in drafter_us.items():
        print(f"  {name:8s} " + "  ".join(f"{size:>6d}: {us:5.1f} us" for size, us in by_size.items()))


def _fmt(value, spec: str, missing: str = "-") -> str:
    return missing if value is None else format(value, spec)


def _identity(row: dict) -> str:
    d = row["divergence"]
    if d is None:
        return "yes"
    gap = "?" if d["gap"] is None else f"{d['gap']:.2f}"
    return f"no @{d['position']} gap {gap}"


def workload_table(summary: dict, kinds: dict[str, str]) -> str:
    header = ("workload", "system", "prefill ms", "TTFT ms", "decode tok/s", "e2e s", "e2e x plain",
              "drafted", "accepted", "mean acc", "passes/tok", "draft ms", "RSS MiB", "identical")
    rows = []
    for workload, kind in kinds.items():
        for system in summary:
            r = summary[system][workload]
            rows.append((
                f"{workload} ({kind})", system, f"{r['prefill_s'] * 1000:.0f}", f"{r['ttft_s'] * 1000:.0f}",
                f"{r['decode_tps']:.1f}", f"{r['total_s']:.2f}", f"{speedup(summary, system, workload):.2f}",
                f"{r['drafted']:.0f}", f"{r['accepted']:.0f}", f"{r['mean_accepted']:.2f}",
                _fmt(r["passes_per_token"], ".2f"), f"{r['draft_s'] * 1000:.1f}",
                _fmt(r["peak_rss_mib"], ".0f"), _identity(r),
            ))
    return grid(header, rows)


def host_table(summary: dict, kinds: dict[str, str]) -> str:
    """Per system and kind of workload: host µs per token and per decode, in all and by part,
    each the mean over the kind's workloads of the median over runs."""
    header = ["system", "workloads", *(f"{p} us/tok" for p in ("host", *PARTS)), "host us/decode", "sample us/decode"]
    rows = []
    for system in summary:
        for kind in dict.fromkeys(kinds.values()):
            cells = [summary[system][w] for w, k in kinds.items() if k == kind]
            if any(c["host_us_per_token"] is None for c in cells):
                continue

            def mean(key, part):
                return sum(c[key][part] for c in cells) / len(cells)

            rows.append([system, kind, *(f"{mean('host_us_per_token', p):.0f}" for p in ("host", *PARTS)),
                         f"{mean('host_us_per_decode', 'host'):.0f}", f"{mean('host_us_per_decode', 'sample'):.0f}"])
    return grid(header, rows)


def overview_table(overview: dict, n_workloads: int) -> str:
    kinds = [k for k in ("copy", "whole-file", "free") if f"{k}_speedup" in next(iter(overview.values()))]
    header = ["system"]
    for kind in kinds:
        header += [f"{kind} x plain", f"{kind} decode x"] + (["of oracle"] if kind != "free" and kind == kinds[0] else [])
        header += [f"{kind} passes/tok"] if kind == "whole-file" else []
    header.append("identical")
    rows = []
    for system, o in overview.items():
        row = [system]
        for kind in kinds:
            row += [f"{o[f'{kind}_speedup']:.2f}", f"{o[f'{kind}_decode_speedup']:.2f}"]
            row += [f"{o['oracle_fraction']:.0%}"] if kind != "free" and kind == kinds[0] else []
            row += [_fmt(o[f"{kind}_passes_per_token"], ".3f")] if kind == "whole-file" else []
        rows.append(row + [f"{o['identical']}/{n_workloads}"])
    return grid(header, rows)


def pairwise_table(pairs: dict[str, dict[str, float]]) -> str:
    names = list(pairs)
    rows = [(a, *(f"{pairs[a][b]:.2f}" for b in names)) for a in names]
    return grid(("row vs column", *names), rows)


def acceptance_lines(summary: dict, workloads: Sequence[str], positions: int = 8) -> list[str]:
    lines = []
    for system, per_workload in summary.items():
        curve = pooled_acceptance(per_workload, workloads)
        if curve:
            lines.append(f"{system:>16}: " + " ".join(f"{p:4.0%}" for p in curve[:positions]))
    return lines


def pooled_acceptance(per_workload: dict, workloads: Sequence[str]) -> list[float]:
    """Acceptance by draft position, pooled over `workloads`."""
    return acceptance_by_position(*pool_positions(per_workload[w] for w in workloads))


def plot(path: str, summary: dict, kinds: dict[str, str], oracle: float) -> None:
    """Decode speedup over plain per workload and system, and acceptance by draft position."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    systems = [s for s in summary if s != "plain"]
    workloads = list(kinds)
    fig, (bars, curves) = plt.subplots(1, 2, figsize=(15, 5.5), gridspec_kw={"width_ratios": [2.2, 1]})
    width = 0.8 / max(1, len(systems))
    for i, system in enumerate(systems):
        xs = [j + (i - (len(systems) - 1) / 2) * width for j in range(len(workloads))]
        bars.bar(xs, [speedup(summary, system, w, "decode_tps") for w in workloads], width, label=system)
    bars.axhline(1.0, color="black", linewidth=0.8)
    bars.axhline(oracle, color="grey", linestyle="--", label=f"oracle ceiling {oracle:.2f}x")
    bars.set_xticks(range(len(workloads)))
    bars.set_xticklabels([f"{w}\n({kinds[w]})" for w in workloads], rotation=35, ha="right", fontsize=7)
    # Decode speed, not end-to-end: drafting does not touch the prefill, and the ceiling is per token.
    bars.set_ylabel("decode tokens/s / plain's")
    bars.set_title("Decode speedup over plain llama.cpp decoding (greedy)")
    bars.legend(fontsize=8)

    copy = copy_heavy(kinds)
    for system in systems:
        curve = pooled_acceptance(summary[system], copy)[:PLOTTED_POSITIONS]
        if curve:
            curves.plot(range(1, len(curve) + 1), curve, marker="o", markersize=3, label=system)
    curves.set_xlabel("draft position")
    curves.set_ylabel("P(accepted | reached)")
    curves.set_ylim(0, 1.02)
    curves.set_title("Acceptance by draft position (copy workloads)")
    curves.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
