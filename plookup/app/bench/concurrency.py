"""`plookup bench --concurrency 1,4,8`: several clients at once on one model with N slots.

For each concurrency c, one ``plookup.Llama(parallel=c)`` serves c client threads (each sending
``--rounds`` requests in turn; together they send every prompt of a kind at least once), two systems
taking turns on it: "plain batched" (the same engine, drafting off: ``max_draft`` 0) and "plookup";
then, where servers are given (``python -m benchmarks.servers --concurrency ...``, a checkout's
harness), llama-server with c slots (``-np c``, each the whole n_ctx), plain and with its n-gram
drafters, its clients streaming.
Workloads: copy-heavy requests (code edits, proofreading), free-form questions, prompts of
random tokens sampled at temperature 1.0, decoded past their end-of-generation tokens (every
system: llama-server with ignore_eos), and "apply": an editor's whole-file apply of a real change
(:mod:`.releases`), long answers up to APPLY_MAX_TOKENS; every prompt prefilled (no slot keeps the
last run's).
Reported per system, workload and c: aggregate completion tokens per second of wall time (prefills
included); aggregate decode tokens per second, c x the mean over requests of (tokens - 1) / (last
token's time - first token's time), the rate c requests at a time decode at, prefills of others
included where they share steps; per request the time to first token and the inter-token latency
(p50, p95); and beside them the always-right bound of the batch's cost curve (what a drafter that
is never wrong could add to c slots decoding plainly). With ``--trace``, each of the engine's runs
also has its decoding steps priced at the cell's pooled step costs (:func:`priced_at_pooled_costs`),
which resolves what the machine's drift from run to run hides in the walls.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ...draft.index_drafter import DEFAULT_MAX_DRAFT
from ...draft.values import Speculative
from .report import grid

RANDOM_TEMPERATURE = 1.0
KINDS = ("copy", "free", "random T=1", "apply")  # request_sets' kinds
DEFAULT_KINDS = "copy,free,random T=1"
# An apply answer is the whole file: up to this many tokens, whatever --max-tokens says.
APPLY_MAX_TOKENS = 2048


@dataclass(frozen=True)
class RequestSet:
    prompts: list  # of token lists
    temperature: float
    through_eog: bool  # decode past end-of-generation tokens (llama-server's ignore_eos)
    max_tokens: Optional[int] = None  # None: --max-tokens


def always_right_bound(cost: np.ndarray, slots: int, max_draft: int) -> float:
    """max over n of (slots * n / cost(slots * n)) / (slots / cost(slots)): an always-right drafter's
    gain over `slots` sequences decoding one token each, on this curve."""
    rows = [slots * n for n in range(1, max_draft + 2) if slots * n <= len(cost)]
    base = slots / cost[slots - 1]
    return max(r / cost[r - 1] for r in rows) / base


def request_sets(llm, seed: int, per_kind: int, kinds=KINDS, requests: int = 0) -> dict[str, RequestSet]:
    """kind -> its requests, for each of `kinds`: `per_kind` prompts of each, random prompts as
    many as the run's `requests` where that is more. Random prompts decode past their
    end-of-generation tokens (llama-server's ignore_eos): sampled at temperature 1 they meet one
    within a few tokens, and their rates would divide by almost nothing. They cost nothing to
    make, so no request repeats one: a repeated prompt is prefilled in one token where its slot
    last held it, and which slot that is follows when the requests before ended: a run's prefill
    would move by chance, and with it the run's wall."""
    from .plain import chat_prompt_tokens
    from .releases import apply_workloads
    from .workloads import standard_workloads

    def tokens(loads) -> list:
        return [chat_prompt_tokens(llm, w.messages) for w in loads]

    def random_prompts() -> list:
        rng = np.random.default_rng(seed)
        return [rng.integers(100, llm.n_vocab(), 64).tolist() for _ in range(max(per_kind, requests))]

    workloads = standard_workloads(seed=seed)
    made = {
        "copy": lambda: RequestSet(tokens([w for w in workloads if w.kind == "copy"][:per_kind]), 0.0, False),
        "free": lambda: RequestSet(tokens([w for w in workloads if w.kind == "free"][:per_kind]), 0.0, False),
        "random T=1": lambda: RequestSet(random_prompts(), RANDOM_TEMPERATURE, True),
        "apply": lambda: RequestSet(tokens(apply_workloads(per_kind)), 0.0, False, APPLY_MAX_TOKENS),
    }
    return {kind: made[kind]() for kind in kinds}


def parse_kinds(text: str) -> list[str]:
    """--kinds' comma-separated list, each one of KINDS."""
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    if not kinds or set(kinds) - set(KINDS):
        raise ValueError(f"--kinds: choose from {', '.join(KINDS)}; got {text!r}")
    return kinds


def timed_request(llm, prompt: list[int], max_tokens: int, temperature: float, seed: int,
                  through_eog: bool = False, n_max: Optional[int] = None) -> dict:
    """One request's tokens, up to `max_tokens` or its end-of-generation token (included, as
    every system of the bench counts it; `through_eog`: on past it), and the time each reached
    its client. `n_max`: its drafts' bound (0: plain decoding)."""
    start = time.perf_counter()
    times, tokens = [], []
    with llm.request(speculative=Speculative(n_max=n_max)) as call:
        call.max_tokens = max_tokens
        call.seed = seed
        for token in itertools.islice(llm.generate(prompt, temp=temperature), max_tokens):
            times.append(time.perf_counter())
            tokens.append(token)
            if not through_eog and llm.is_eog(token):
                break
    return dict(start=start, times=times, tokens=tokens, forward_passes=call.stats.forward_passes,
                accepted=call.stats.accepted)


def run_cell(request, prompts: list, clients: int, max_tokens: int, temperature: float,
             through_eog: bool = False) -> dict:
    """All `prompts` from `clients` threads at once, each ``request(prompt, max_tokens,
    temperature, seed, through_eog)`` (:func:`timed_request`'s record): aggregate and
    per-request figures."""
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=clients) as pool:
        done = list(pool.map(lambda a: request(a[1], max_tokens, temperature, a[0], through_eog), enumerate(prompts)))
    wall = time.perf_counter() - start
    outputs = [r.get("tokens") for r in done]
    requests = [dict(tokens=len(r["times"]), ttft=r["times"][0] - r["start"],
                     decode_seconds=r["times"][-1] - r["times"][0]) for r in done if r["times"]]
    tokens = sum(r["tokens"] for r in requests)
    ttft = [r["ttft"] for r in requests]
    itl = [b - a for r in done for a, b in zip(r["times"], r["times"][1:])]
    # Each client's decode rate weighs every token once (the tokens after each request's first over
    # the time they took): a mean of per-request rates would let a request of a few tokens (or a
    # streamed chunk of several) count as much as one of thousands.
    decode_seconds = sum(r["decode_seconds"] for r in requests)
    decoded = sum(r["tokens"] - 1 for r in requests)
    return dict(
        tokens_per_second=tokens / wall, tokens=tokens, seconds=wall,
        decode_tokens_per_second=clients * decoded / decode_seconds if decode_seconds else 0.0,
        ttft_p50=float(np.percentile(ttft, 50)), ttft_p95=float(np.percentile(ttft, 95)),
        itl_p50=float(np.percentile(itl, 50)) if itl else 0.0, itl_p95=float(np.percentile(itl, 95)) if itl else 0.0,
        passes_per_token=None if any(r["forward_passes"] is None for r in done)
        else sum(r["forward_passes"] for r in done) / max(1, tokens),
        outputs=outputs,  # each request's tokens, where the system reports them (plookup's)
        requests=requests,
    )


HEADER = ["c", "workload", "system", "tok/s", "decode tok/s", "decode x plain batched",
          "wall x plain batched, mean ± sd of repeats", "bound",
          "TTFT p50/p95 s", "ITL p50/p95 ms", "passes/tok"]


def cmd_concurrency(args, kwargs: dict, levels: list[int], note, servers=None) -> dict:
    """Every level, system and workload; prints the table, returns the record. `servers`: systems
    outside this process that run too (their ``level(kwargs, eos, clients)`` starts a level's:
    benchmarks/servers' llama-server), or None."""
    kinds = parse_kinds(args.kinds)
    record = dict(levels=levels, max_tokens=args.max_tokens, cells=[])
    rows = []
    for clients in levels:
        run_level(args, kwargs, clients, kinds, note, servers, record, rows)
    print(grid(HEADER, rows))
    return record


def run_level(args, kwargs: dict, clients: int, kinds: list[str], note, servers, record: dict,
              rows: list) -> None:
    """One concurrency level: the model loaded with `clients` slots (and the `servers`' systems
    started with as many), every workload kind run on every system; the level's table rows and
    cells go into `rows` and `record`."""
    import plookup

    note(f"concurrency {clients}: loading the model with {clients} slots")
    # Decodes on a thread of their own, as `plookup serve` has them: the clients are threads
    # of a pool, and a decode from a thread other than the one that loaded the model ran 30%
    # slower at one client (plookup.engine.decode_thread).
    # The drafter's bound is the longest any system drafts; each request bounds its own.
    own = DEFAULT_MAX_DRAFT if args.max_draft is None else args.max_draft
    llm = plookup.Llama(parallel=clients, max_draft=max([own, *(args.also_max_draft or ())]), decode_thread=True,
                        **kwargs)
    own = min(own, llm.drafter.max_draft)  # where the exactness probe capped the drafter
    bound = always_right_bound(llm.drafter.policy.cost, clients, own)
    sets = request_sets(llm, args.seed, args.per_kind, kinds, requests=clients * args.rounds)
    remotes = servers.level(kwargs, llm.token_eos(), clients) if servers else []
    # The engine's systems by their max_draft (plain batched: 0), then llama-server's.
    local = {"plain batched": 0, "plookup": own} | {f"plookup max-draft {n}": n for n in args.also_max_draft or ()}
    systems = {s: None for s in local} | {s.name: s for s in remotes}
    try:
        first = next(iter(sets.values()))
        warm_up = functools.partial(run_cell, prompts=(first.prompts * clients)[:clients], clients=clients,
                                    max_tokens=8, temperature=first.temperature, through_eog=True)
        warm_up(functools.partial(timed_request, llm))  # llama-server's: at each (re)start
        for kind, requests in sets.items():
            cells = run_workload(args, llm, clients, kind, requests, systems, local, note, warm_up)
            # Greedy outputs, for `plookup bench --replay` under another curve.
            if requests.temperature == 0 and clients == record["levels"][0]:
                record.setdefault("recorded", {})[kind] = [
                    dict(name=f"{kind}:{i}", prompt_tokens=prompt, output_tokens=output)
                    for i, (prompt, output) in enumerate(zip(requests.prompts, cells["plain batched"][0]["outputs"]))
                ]
            for cell in itertools.chain(*cells.values()):
                del cell["outputs"]  # kept once, above
            add_rows(rows, record, clients, kind, bound, cells)
    finally:
        for remote in remotes:
            remote.close()


def order_unbalanced(repeats: int, systems: int) -> bool:
    """Whether `repeats` runs of `systems` systems, their order reversed every other repeat, run
    one system first more often than another (an odd count of two or more; one repeat shows no
    spread to bias)."""
    return systems > 1 and repeats > 1 and repeats % 2 == 1


def run_workload(args, llm, clients: int, kind: str, requests: RequestSet, systems: dict, local: dict,
                 note, warm_up) -> dict:
    """One workload kind at one level: system -> its runs (:func:`run_cell`'s records), every
    system run ``--repeats`` times, side by side, each run with nothing from the runs before it:
    plookup's slots drop their cells, llama-server starts afresh. `warm_up(request)`: one short
    untimed run, after each fresh start (the first decodes of a fresh context, graph allocation
    and kernels loaded, ran up to 40 % slower)."""
    prompts, temperature, through_eog = requests.prompts, requests.temperature, requests.through_eog
    max_tokens = requests.max_tokens or args.max_tokens
    # Every client sends `rounds` requests in turn (distinct prompts first, then again).
    wanted = max(clients * args.rounds, len(prompts))
    if wanted > len(prompts) and len(systems) > len(local):
        note(f"c={clients} {kind}: {wanted} requests of {len(prompts)} prompts, some sent twice in a run: "
             "llama-server's ngram-mod drafts the second from the first's answer, plookup here does not "
             "(no memory); --per-kind >= clients x rounds avoids it")
    prompts = (prompts * wanted)[:wanted]
    if order_unbalanced(args.repeats or 1, len(systems)):
        note(f"c={clients} {kind}: {args.repeats} repeats, the systems' order reversed every other one: "
             "an odd count runs the first system first once more (the second of a pair has read slower "
             "here); an even --repeats balances it")
    cells = {s: [] for s in systems}
    for repeat in range(args.repeats or 1):
        # Side by side: the systems take turns, in reverse order every other repeat, so
        # that a drift of the machine's speed favours none of them.
        order = list(systems.items())
        for system, remote in order[::-1] if repeat % 2 else order:
            if remote is None:
                llm.forget_slots()  # every run prefills its prompts: no slot keeps the last run's
                llm.trace_steps(args.trace)
                request = functools.partial(timed_request, llm, n_max=local[system])
            else:
                note(f"c={clients} {kind}: starting {system} (llama-server -np {clients})")
                remote.restart()  # its n-gram pool would hold the answers of the runs before
                request = remote.stream
                warm_up(request)
            cell = run_cell(request, prompts, clients, max_tokens, temperature, through_eog)
            if remote is not None:
                remote.close()  # one model in memory at a time
            cells[system].append(cell)
            note(f"c={clients} {kind} {system}: {cells[system][-1]['tokens_per_second']:.1f} tok/s, "
                 f"{cells[system][-1]['decode_tokens_per_second']:.1f} decoding")
            if remote is None and args.trace:
                cell["steps"] = [dataclasses.asdict(step) for step in llm.traced_steps()]
                llm.trace_steps(False)
                note("  " + trace_summary(cell["steps"], clients))
    if args.trace:
        traced = {s: [c["steps"] for c in cells[s]] for s in local}
        for system, priced in priced_at_pooled_costs(traced).items():
            for cell, seconds in zip(cells[system], priced):
                cell["priced_decode_seconds"] = seconds
        for system in list(local)[1:]:
            ratios = priced_ratios(cells[system], cells["plain batched"])
            note(f"c={clients} {kind} {system}: decoding steps at the runs' pooled step costs "
                 f"{mean_sd(ratios)} x plain batched's")
    return cells


def trace_summary(steps: list[dict], clients: int) -> str:
    """Where a run's time went, from its steps (:class:`plookup.engine.step.StepRecord` as dicts):
    decodes and host work, the steps that drafted and what they returned, and the tail, the steps
    after the last one with every slot busy (a closed set of requests ends with fewer rows a step:
    where some requests draft and finish first, the others finish on their own)."""
    seconds = [s["host_before"] + s["decode"] + s["host_after"] for s in steps]
    busy = [len(s["drafted"]) + (s["prefilled"] > 0) >= clients for s in steps]
    last_full = max((i for i, b in enumerate(busy) if b), default=-1)
    drafting = [s for s in steps if sum(s["drafted"])]
    return (f"{len(steps)} steps, {sum(s['rows'] for s in steps)} rows: decode {sum(s['decode'] for s in steps):.1f} s, "
            f"host {sum(s['host_before'] + s['host_after'] for s in steps):.2f} s; {len(drafting)} steps drafted "
            f"{sum(sum(s['drafted']) for s in drafting)} tokens, {sum(sum(s['accepted']) for s in drafting)} accepted; "
            f"tail {sum(seconds[last_full + 1 :]):.1f} s ({len(steps) - last_full - 1} steps with fewer than {clients} slots)")


def priced_at_pooled_costs(runs: dict[str, list[list[dict]]]) -> dict[str, list[float]]:
    """system -> each of its runs' decoding steps (a prompt in none of them) priced at the median
    ``llama_decode`` time of every decoding step with as many rows, pooled over every system's
    runs given (`runs`: system -> its runs' steps, :class:`plookup.engine.step.StepRecord` as
    dicts): the seconds its steps' count and sizes take at one state of the machine. The machine's
    speed drifts from run to run by more than the few per cent two systems' walls differ by (the
    same step's median moves between runs of one bench); priced alike, the runs differ by what the
    systems did. Prefills are left out: both systems prefill the same prompts. Rows alone set the
    price: a step of 8 rows on one slot and one of a row on each of 8 slots price alike (the second
    is the common one), and a size only one system stepped is priced by its own runs."""
    pooled: dict[int, list[float]] = {}
    for steps in itertools.chain(*runs.values()):
        for step in steps:
            if not step["prefilled"]:
                pooled.setdefault(step["rows"], []).append(step["decode"])
    price = {rows: float(np.median(times)) for rows, times in pooled.items()}
    return {system: [sum(price[s["rows"]] for s in steps if not s["prefilled"]) for steps in system_runs]
            for system, system_runs in runs.items()}


def priced_ratios(runs: list[dict], plain: list[dict]) -> Optional[list[float]]:
    """Plain batching's priced decoding steps over a system's, repeat by repeat (the runs' traces
    priced by :func:`priced_at_pooled_costs`); None where a run was not priced (no --trace, or
    llama-server's)."""
    if not runs or not all("priced_decode_seconds" in r for r in [*runs, *plain]):
        return None
    return [p["priced_decode_seconds"] / r["priced_decode_seconds"] for r, p in zip(runs, plain)]


def repeats_sd(values: list[float]) -> float:
    """The repeats' sample standard deviation; 0 for a single repeat (no spread to show)."""
    return float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


def mean_sd(values: list[float]) -> str:
    """The repeats' mean ± sample standard deviation, as the bench prints ratios."""
    return f"{np.mean(values):.3f} ± {repeats_sd(values):.3f}"


def add_rows(rows: list, record: dict, clients: int, kind: str, bound: float, cells: dict) -> None:
    """The table's rows and the record's cells of one level and workload: each system's best run,
    and its wall throughput over plain batched's run by run (the mean and spread of the repeats'
    ratios: the systems ran side by side, so each ratio shares the machine's state of its repeat)."""
    best = {s: max(cs, key=lambda c: c["decode_tokens_per_second"]) for s, cs in cells.items()}
    for system in cells:
        cell = best[system]
        ratio = cell["decode_tokens_per_second"] / best["plain batched"]["decode_tokens_per_second"]
        paired = [c["tokens_per_second"] / p["tokens_per_second"] for c, p in zip(cells[system], cells["plain batched"])]
        rows.append([str(clients), kind, system, f"{cell['tokens_per_second']:.1f}",
                     f"{cell['decode_tokens_per_second']:.1f}", f"{ratio:.2f}",
                     mean_sd(paired),
                     f"{bound:.2f}" if system == "plookup" else "",
                     f"{cell['ttft_p50']:.2f}/{cell['ttft_p95']:.2f}",
                     f"{1e3 * cell['itl_p50']:.0f}/{1e3 * cell['itl_p95']:.0f}",
                     "-" if cell["passes_per_token"] is None else f"{cell['passes_per_token']:.2f}"])
        record["cells"].append(dict(concurrency=clients, workload=kind, system=system, bound=bound,
                                    runs=cells[system], best=cell, wall_x_plain=paired,
                                    priced_x_plain=priced_ratios(cells[system], cells["plain batched"])))


def plot(path: str, record: dict) -> None:
    """Per workload, against concurrency, a line per system: aggregate tokens/s of its best run
    (top), and its wall throughput over plain batched's, the mean and spread of the repeats'
    ratios, and where the runs were traced their decoding steps priced alike
    (:func:`priced_at_pooled_costs`), beside plookup's always-right bound (bottom)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = list(dict.fromkeys(c["workload"] for c in record["cells"]))
    fig, axes = plt.subplots(2, len(kinds), figsize=(5 * len(kinds), 8), squeeze=False)
    systems = list(dict.fromkeys(c["system"] for c in record["cells"]))
    for column, kind in enumerate(kinds):
        rates, ratios = axes[0][column], axes[1][column]
        for system in systems:
            cells = [c for c in record["cells"] if c["workload"] == kind and c["system"] == system]
            levels = [c["concurrency"] for c in cells]
            line = rates.plot(levels, [c["best"]["decode_tokens_per_second"] for c in cells], marker="o",
                              label=f"{system}, decoding")[0]
            rates.plot(levels, [c["best"]["tokens_per_second"] for c in cells], marker="x", linestyle=":",
                       color=line.get_color(), label=f"{system}, wall (prefills in)")
            def spread(chosen: list, key: str, **style) -> None:
                ratios.errorbar([c["concurrency"] for c in chosen], [np.mean(c[key]) for c in chosen],
                                yerr=[repeats_sd(c[key]) for c in chosen], capsize=3, color=line.get_color(), **style)

            spread(cells, "wall_x_plain", marker="o", label=system)
            priced = [c for c in cells if c.get("priced_x_plain") and c["system"] != "plain batched"]
            if priced:
                spread(priced, "priced_x_plain", marker="s", linestyle=":", label=f"{system}, decoding steps priced alike")
            if system == "plookup":
                ratios.plot(levels, [c["bound"] for c in cells], linestyle="--", color=line.get_color(),
                            label="always-right bound (decoding alone)")
        rates.set_title(kind)
        rates.set_ylabel("aggregate tokens/s (best run)")
        rates.set_ylim(bottom=0)
        rates.legend(fontsize=7)
        ratios.set_ylabel("x plain batched: wall, steps priced alike (mean ± sd)")
        ratios.axhline(1.0, color="grey", linewidth=0.8)
        ratios.legend(fontsize=7)
        for ax in (rates, ratios):
            ax.set_xlabel("concurrent requests (slots)")
            ax.set_xticks(record["levels"])
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
