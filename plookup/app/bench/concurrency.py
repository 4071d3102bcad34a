"""`plookup bench --concurrency 1,4,8`: several clients at once on one model with N slots.

For each concurrency c, one ``plookup.Llama(parallel=c)`` serves c client threads (each sending
``--rounds`` requests in turn; together they send every prompt of a kind at least once), two systems
taking turns on it: "plain batched" (the same engine, drafting off: ``max_draft`` 0) and "plookup";
then, where a llama-server binary is given, llama-server with c slots (``-np c``, each the whole
n_ctx), plain and with its n-gram drafters, its clients streaming.
Workloads: copy-heavy requests (code edits, proofreading), free-form questions, and prompts of
random tokens sampled at temperature 1.0, decoded past their end-of-generation tokens (every
system: llama-server with ignore_eos); every prompt prefilled (no slot keeps the last run's).
Reported per system, workload and c: aggregate completion tokens per second of wall time (prefills
included); aggregate decode tokens per second, c x the mean over requests of (tokens - 1) / (last
token's time - first token's time), the rate c requests at a time decode at, prefills of others
included where they share steps; per request the time to first token and the inter-token latency
(p50, p95); and beside them the always-right bound of the batch's cost curve (what a drafter that
is never wrong could add to c slots decoding plainly).
"""

from __future__ import annotations

import functools
import itertools
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Optional

import llama_cpp
import numpy as np

from .report import grid

SYSTEMS = ("plain batched", "plookup")
# llama-server's systems: decoding plainly (None) and its model-free drafters.
SERVER_SPEC_TYPES = (None, "ngram-mod", "ngram-simple")
RANDOM_TEMPERATURE = 1.0
KINDS = ("copy", "free", "random T=1")  # request_sets' kinds


def always_right_bound(cost: np.ndarray, slots: int, max_draft: int) -> float:
    """max over n of (slots * n / cost(slots * n)) / (slots / cost(slots)): an always-right drafter's
    gain over `slots` sequences decoding one token each, on this curve."""
    rows = [slots * n for n in range(1, max_draft + 2) if slots * n <= len(cost)]
    base = slots / cost[slots - 1]
    return max(r / cost[r - 1] for r in rows) / base


def request_sets(llm, seed: int, per_kind: int) -> dict[str, tuple[list[list[int]], float, bool]]:
    """kind -> (prompts, temperature, through_eog). Random prompts decode past their
    end-of-generation tokens (llama-server's ignore_eos): sampled at temperature 1 they meet one
    within a few tokens, and their rates would divide by almost nothing."""
    from .plain import chat_prompt_tokens
    from .workloads import standard_workloads

    workloads = standard_workloads(seed=seed)
    copy = [w for w in workloads if w.kind == "copy"][:per_kind]
    free = [w for w in workloads if w.kind == "free"][:per_kind]
    rng = np.random.default_rng(seed)
    random_prompts = [rng.integers(100, llm.n_vocab(), 64).tolist() for _ in range(per_kind)]
    return {
        "copy": ([chat_prompt_tokens(llm, w.messages) for w in copy], 0.0, False),
        "free": ([chat_prompt_tokens(llm, w.messages) for w in free], 0.0, False),
        "random T=1": (random_prompts, RANDOM_TEMPERATURE, True),
    }


def parse_kinds(text: str) -> list[str]:
    """--kinds' comma-separated list, each one of KINDS."""
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    if not kinds or set(kinds) - set(KINDS):
        raise ValueError(f"--kinds: choose from {', '.join(KINDS)}; got {text!r}")
    return kinds


def timed_request(llm, prompt: list[int], max_tokens: int, temperature: float, seed: int,
                  through_eog: bool = False) -> dict:  # fmt: skip
    """One request's tokens, up to `max_tokens` or its end-of-generation token (included, as
    every system of the bench counts it; `through_eog`: on past it), and the time each reached
    its client."""
    start = time.perf_counter()
    times = []
    vocab = llm._model.vocab
    with llm.request() as call:
        call.max_tokens = max_tokens
        call.seed = seed
        for token in itertools.islice(llm.generate(prompt, temp=temperature), max_tokens):
            times.append(time.perf_counter())
            if not through_eog and llama_cpp.llama_vocab_is_eog(vocab, token):
                break
    return dict(start=start, times=times, forward_passes=call.stats.forward_passes, accepted=call.stats.accepted)


def run_cell(request, prompts: list, clients: int, max_tokens: int, temperature: float,
             through_eog: bool = False) -> dict:  # fmt: skip
    """All `prompts` from `clients` threads at once, each ``request(prompt, max_tokens,
    temperature, seed, through_eog)`` (:func:`timed_request`'s record): aggregate and
    per-request figures."""
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=clients) as pool:
        done = list(pool.map(lambda a: request(a[1], max_tokens, temperature, a[0], through_eog), enumerate(prompts)))
    wall = time.perf_counter() - start
    tokens = sum(len(r["times"]) for r in done)
    ttft = [r["times"][0] - r["start"] for r in done if r["times"]]
    itl = [b - a for r in done for a, b in zip(r["times"], r["times"][1:])]
    rates = [(len(r["times"]) - 1) / (r["times"][-1] - r["times"][0]) for r in done if len(r["times"]) > 1]
    return dict(
        tokens_per_second=tokens / wall, tokens=tokens, seconds=wall,
        decode_tokens_per_second=clients * float(np.mean(rates)) if rates else 0.0,
        ttft_p50=float(np.percentile(ttft, 50)), ttft_p95=float(np.percentile(ttft, 95)),
        itl_p50=float(np.percentile(itl, 50)) if itl else 0.0, itl_p95=float(np.percentile(itl, 95)) if itl else 0.0,
        passes_per_token=None if any(r["forward_passes"] is None for r in done)
        else sum(r["forward_passes"] for r in done) / max(1, tokens),
    )  # fmt: skip


def cmd_concurrency(args, kwargs: dict, levels: list[int], note, server: Optional[str] = None) -> dict:
    """Every level, system and workload; prints the table, returns the record. `server`: a
    llama-server binary whose systems run too."""
    import plookup

    from .llama_server import ServerSystem

    kinds = parse_kinds(args.kinds)
    record = dict(levels=levels, max_tokens=args.max_tokens, cells=[])
    header = ["c", "workload", "system", "tok/s", "decode tok/s", "decode x plain batched", "bound",
              "TTFT p50/p95 s", "ITL p50/p95 ms", "passes/tok"]  # fmt: skip
    rows = []
    for clients in levels:
        note(f"concurrency {clients}: loading the model with {clients} slots")
        llm = plookup.Llama(parallel=clients, max_draft=args.max_draft, **kwargs)
        own = llm.drafter.max_draft
        bound = always_right_bound(llm.drafter.policy.cost, clients, own)
        sets = {k: v for k, v in request_sets(llm, args.seed, args.per_kind).items() if k in kinds}
        servers = []
        if server:
            eos = llm.token_eos()
            for spec in SERVER_SPEC_TYPES:
                note(f"concurrency {clients}: starting llama-server -np {clients} --spec-type {spec or 'none'}")
                servers.append(ServerSystem(server, spec, kwargs, eos, slots=clients))
        systems = {s: None for s in SYSTEMS} | {s.name: s for s in servers}
        try:
            for kind, (prompts, temperature, through_eog) in sets.items():
                # Every client sends `rounds` requests in turn (distinct prompts first, then again).
                wanted = max(clients * args.rounds, len(prompts))
                prompts = (prompts * wanted)[:wanted]
                cells = {s: [] for s in systems}
                for _ in range(args.repeats or 1):
                    for system, remote in systems.items():  # side by side: the systems take turns
                        if remote is None:
                            llm.drafter.max_draft = 0 if system == "plain batched" else own
                            llm._engine.forget()  # every run prefills its prompts: no slot keeps the last run's
                            request = functools.partial(timed_request, llm)
                        else:
                            request = remote.stream
                        cells[system].append(run_cell(request, prompts, clients, args.max_tokens, temperature, through_eog))
                        note(f"c={clients} {kind} {system}: {cells[system][-1]['tokens_per_second']:.1f} tok/s, "
                             f"{cells[system][-1]['decode_tokens_per_second']:.1f} decoding")  # fmt: skip
                add_rows(rows, record, clients, kind, bound, cells)
        finally:
            for remote in servers:
                remote.close()
        llm.drafter.max_draft = own
        del llm
    print(grid(header, rows))
    return record


def add_rows(rows: list, record: dict, clients: int, kind: str, bound: float, cells: dict) -> None:
    """The table's rows and the record's cells of one level and workload: each system's best run."""
    best = {s: max(cs, key=lambda c: c["decode_tokens_per_second"]) for s, cs in cells.items()}
    for system in cells:
        cell = best[system]
        ratio = cell["decode_tokens_per_second"] / best["plain batched"]["decode_tokens_per_second"]
        rows.append([str(clients), kind, system, f"{cell['tokens_per_second']:.1f}",
                     f"{cell['decode_tokens_per_second']:.1f}", f"{ratio:.2f}",
                     f"{bound:.2f}" if system == "plookup" else "",
                     f"{cell['ttft_p50']:.2f}/{cell['ttft_p95']:.2f}",
                     f"{1e3 * cell['itl_p50']:.0f}/{1e3 * cell['itl_p95']:.0f}",
                     "-" if cell["passes_per_token"] is None else f"{cell['passes_per_token']:.2f}"])  # fmt: skip
        record["cells"].append(dict(concurrency=clients, workload=kind, system=system, bound=bound,
                                    runs=cells[system], best=cell))  # fmt: skip


def plot(path: str, record: dict) -> None:
    """Aggregate tokens/s against concurrency, one panel per workload, a line per system."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = list(dict.fromkeys(c["workload"] for c in record["cells"]))
    fig, axes = plt.subplots(1, len(kinds), figsize=(5 * len(kinds), 4), squeeze=False)
    systems = list(dict.fromkeys(c["system"] for c in record["cells"]))
    for ax, kind in zip(axes[0], kinds):
        for system in systems:
            cells = [c for c in record["cells"] if c["workload"] == kind and c["system"] == system]
            ax.plot([c["concurrency"] for c in cells], [c["best"]["decode_tokens_per_second"] for c in cells],
                    marker="o", label=f"{system}, decoding")
            ax.plot([c["concurrency"] for c in cells], [c["best"]["tokens_per_second"] for c in cells],
                    marker="x", linestyle=":", label=f"{system}, wall (prefills in)")  # fmt: skip
        ax.set_title(kind)
        ax.set_xlabel("concurrent requests (slots)")
        ax.set_ylabel("aggregate tokens/s")
        ax.set_xticks(record["levels"])
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
