"""`plookup bench`: plain llama.cpp, its prompt-lookup decoding and plookup's drafters side by side on
real workloads, against this machine's oracle ceiling.

The reference for identity is plain greedy decoding one token per llama_decode
(plookup.app.bench.plain.greedy_with_gaps), run once per workload in this process, which also measures the
verify-cost curve. Every compared system runs in a worker process of its own.

What drives servers over HTTP is a checkout's harness, not part of the package: llama-server's
systems beside these (``python -m benchmarks.servers``, the same options and --llama-server PATH)
and the editors' requests (``python -m benchmarks.editors``); `plookup bench --llama-server` or
--editor says where they went.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import sys
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ...draft.drafters import make_drafter
from ...measure.costs import measure_cost_curve, oracle_speedup
from ..options import add_model_options, layers_line, model_kwargs, plain_llama
from ..tables import notes
from . import report as bench_report
from .concurrency import DEFAULT_KINDS
from .measure import (
    BASELINE,
    geometric_mean,
    pairwise_speedups,
    run_interleaved,
    summarize,
    system_overview,
)
from .replay import load_recorded, replay, replay_speedups
from .systems import BACKEND_SYSTEM, CORPUS_SYSTEM, IN_PROCESS_SYSTEMS, LIVE_MEMORY_SYSTEM, MEMORY_SYSTEM
from .workloads import whole_file_workloads

note = notes("bench")

DEFAULT_REPEATS, DEFAULT_MAX_TOKENS = 3, 200
QUICK_REPEATS, QUICK_MAX_TOKENS = 1, 96
REPLAY_DRAFTERS = ("suffix", "ngram")
# Whole-file edits: a 200-400-line module in and out, about 3k tokens each way.
DEFAULT_WHOLE_FILES, WHOLE_FILE_N_CTX, WHOLE_FILE_MAX_TOKENS = 2, 8192, 3500
# llama_cpp's PLD (draft_model) keeps n_vocab x n_ctx float32 logits (4.6 GiB for Qwen2.5-Coder at
# n_ctx 8192); past this share of the machine's memory it is not run, as its systems and the
# others are all loaded at once.
PLD_MEMORY_SHARE = 0.25


# Options of runs that left the package for a checkout's benchmarks/ (servers driven over HTTP):
# option -> where it went. `plookup bench` takes them still, to say so.
MOVED = {
    "--llama-server": "python -m benchmarks.servers (plookup bench's options, and --llama-server PATH)",
    "--server-draft-max": "python -m benchmarks.servers --concurrency LIST --server-draft-max LIST",
    "--editor": "python -m benchmarks.editors --editor LIST",
    "--editor-report": "python -m benchmarks.editors --editor-report FILE...",
}


def register(commands) -> None:
    """The `bench` command and its options, in the order --help lists them."""
    bench = commands.add_parser(
        "bench", help="compare plain, PLD and plookup decoding on real workloads",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_options(bench)
    for option in MOVED:
        bench.add_argument(option, nargs="*", dest=f"moved_{option[2:].replace('-', '_')}", help=argparse.SUPPRESS)
    bench.set_defaults(func=cmd_bench)


def add_options(bench) -> None:
    """Every option of `plookup bench`, on `bench` (its subparser, or the parser of a harness that
    runs it with more systems: benchmarks/servers)."""
    add_model_options(bench)  # no --drafter: every plookup drafter is a system of its own
    add_comparison_options(bench)
    add_record_options(bench)
    add_concurrency_options(bench)


def add_comparison_options(bench) -> None:
    """The single-stream comparison's options: runs, workloads, the systems compared, sampling."""
    bench.add_argument("--repeats", type=int, help=f"runs of each system per workload (default {DEFAULT_REPEATS})")
    bench.add_argument("--max-tokens", type=int, help=f"tokens per generation (default {DEFAULT_MAX_TOKENS})")
    bench.add_argument("--quick", action="store_true",
                       help=f"3 workloads, {QUICK_REPEATS} repeat, {QUICK_MAX_TOKENS} tokens: 1-2 minutes")
    bench.add_argument("--whole-files", type=int, default=DEFAULT_WHOLE_FILES, metavar="N",
                       help=f"also N whole-file edits, run with n_ctx {WHOLE_FILE_N_CTX} and up to "
                            f"{WHOLE_FILE_MAX_TOKENS} tokens (default {DEFAULT_WHOLE_FILES}; none with --quick)")
    bench.add_argument("--workload", metavar="FILE.jsonl",
                       help='your own workloads instead: {"messages": [...], "kind"?: "copy"|"free", "name"?} a line')
    bench.add_argument("--systems", default=",".join(IN_PROCESS_SYSTEMS),
                       help=f"comma-separated in-process systems (default: {', '.join(IN_PROCESS_SYSTEMS)}; "
                            f"plain is required; {BACKEND_SYSTEM}: the suffix drafter with greedy rows sampled "
                            f"on the backend; {LIVE_MEMORY_SYSTEM}: the suffix drafter with a memory every request "
                            f"joins, as `plookup serve` runs by default, so a repeat drafts from the earlier answer)")
    bench.add_argument("--memory", metavar="PATH",
                       help=f"also run {MEMORY_SYSTEM}: the suffix drafter with the cross-request memory that "
                            "`serve`/`generate --memory PATH` saved, read only (the bench's own requests "
                            "are not added to it)")
    bench.add_argument("--corpus", metavar="FILE",
                       help=f"also run {CORPUS_SYSTEM}: the suffix drafter that drafts also from this corpus index "
                            "(one file of `plookup corpus build PATH... -o FILE -m MODEL`, for the benched model)")
    bench.add_argument("--workloads", choices=("standard", "corpus"), default="standard",
                       help="the built-in workloads: standard (code edits, proofreading, questions), or corpus "
                            "(new code against a project and libraries the prompt does not show, and "
                            "proofreading; for --corpus, see plookup.app.bench.workloads.corpus_workloads)")
    bench.add_argument("--temperature", type=float, default=0.0,
                       help="sampling temperature (default 0: greedy); identity vs plain is then moot")
    bench.add_argument("--seed", type=int, default=0, help="seed of the built-in workloads' typos and edits")


def add_record_options(bench) -> None:
    """A run's record (--json, --plot), and replaying a recorded run without a model."""
    bench.add_argument("--json", metavar="FILE", help="write every figure, prompt and output as JSON")
    bench.add_argument("--plot", metavar="FILE.png", help="write the speedup and acceptance chart")
    bench.add_argument("--replay", metavar="FILE",
                       help="no model: replay the drafters on outputs recorded by --json (or JSONL of "
                            "prompt_tokens/output_tokens)")
    bench.add_argument("--cost-curve", metavar="FILE|flat",
                       help="with --replay: model the drafts under this verify-cost curve instead of the recorded "
                            "one, e.g. another machine's (plookup doctor --json, plookup bench --json, or a JSON "
                            "list of costs relative to one token); flat: every batch up to max-draft + 1 tokens "
                            "costs one decode, the limit of memory-bound hardware")


def add_concurrency_options(bench) -> None:
    """--concurrency and the options of that run (plookup.app.bench.concurrency)."""
    bench.add_argument("--concurrency", metavar="LIST",
                       help="e.g. 1,4,8: instead of the single-stream comparison, that many clients at once on "
                            "a model with as many slots, plain batched vs plookup (see plookup.app.bench.concurrency)")
    bench.add_argument("--per-kind", type=int, default=4, metavar="N",
                       help="with --concurrency: distinct prompts per workload kind (default 4; random prompts: "
                            "at least one per request)")
    bench.add_argument("--rounds", type=int, default=1, metavar="N",
                       help="with --concurrency: requests each client sends, one after another (default 1); "
                            "more keep every slot busy, so that a level's throughput is not one batch's tail")
    bench.add_argument("--kinds", metavar="LIST", default=DEFAULT_KINDS,
                       help="with --concurrency: the workload kinds to run, of copy, free, \"random T=1\" and "
                            "apply (whole-file applies of real changes from PyPI releases, long answers; "
                            f"downloaded with pip once) (default: {DEFAULT_KINDS})")
    bench.add_argument("--also-max-draft", metavar="LIST", type=lambda text: [int(n) for n in text.split(",")],
                       help="with --concurrency: also run plookup with each of these --max-draft values, side by "
                            "side with the others (e.g. 16: drafts as long as before they grew)")
    bench.add_argument("--trace", action="store_true",
                       help="with --concurrency and --json: keep every step of plookup's engine in the JSON (its "
                            "rows, drafts and accepted tokens, time in llama_decode and on the host)")


@dataclass
class Reference:
    """What plain decoding and the model alone tell before any system runs."""

    workloads: list  # of plookup.app.bench.workloads.Workload
    prompts: dict[str, list[int]]
    outputs: dict[str, tuple[list[int], list[float]]]  # plain greedy tokens and top-2 gaps
    cost: np.ndarray  # the verify-cost curve
    bounds: dict[str, dict[str, float]]  # replay_bounds
    drafter_us: dict[str, dict[int, float]]
    eos: int
    n_vocab: int

    @property
    def kinds(self) -> dict[str, str]:
        return {w.name: w.kind for w in self.workloads}


@dataclass
class Phase:
    """Workloads run with one model setting: the standard ones, or whole-file edits, which need a
    longer context and output."""

    name: str
    kwargs: dict  # the model's settings
    max_tokens: int
    systems: list[str]
    workloads: Callable  # (plain llama_cpp.Llama, first_answer(messages) -> str) -> [Workload]


def cmd_bench(args: argparse.Namespace, servers=None) -> int:
    """`servers`: systems run outside this process beside the engine's, or None (`plookup bench`):
    ``single_stream(kwargs, eos)``, a callable starting each for the single-stream comparison, and
    ``level(kwargs, eos, clients)``, those of a concurrency level started (benchmarks/servers'
    llama-server)."""
    for option, where in MOVED.items():
        if getattr(args, f"moved_{option[2:].replace('-', '_')}", None) is not None:
            raise ValueError(f"{option} has moved out of the package, to a checkout's benchmarks/: {where}")
    if args.rpc and args.concurrency:
        # That run keeps every system loaded at once; a server would leave the second client unanswered.
        raise ValueError("--rpc: --concurrency keeps every system loaded at once, and an RPC "
                         "server serves one client at a time; the single-stream comparison runs over RPC "
                         "one system after another (examples/rpc_delay.py also adds link delays)")
    if args.cost_curve and not args.replay:
        raise ValueError("--cost-curve models a recorded run's drafts: give the run with --replay FILE")
    if args.replay:
        return cmd_replay(args)
    if args.concurrency:
        return cmd_concurrency(args, servers)
    names = [s for s in args.systems.split(",") if s]
    if BASELINE not in names:
        raise ValueError(f"--systems must include {BASELINE}: every ratio is against it")
    if args.memory is not None:
        if not os.path.exists(args.memory):
            raise ValueError(f"--memory {args.memory}: no such file (`plookup serve --memory PATH` writes one)")
        if MEMORY_SYSTEM not in names:
            names.append(MEMORY_SYSTEM)
    if args.corpus is not None:
        if not os.path.exists(args.corpus):
            raise ValueError(f"--corpus {args.corpus}: no such file (`plookup corpus build PATH... -o FILE` writes one)")
        if CORPUS_SYSTEM not in names:
            names.append(CORPUS_SYSTEM)
    repeats = args.repeats or (QUICK_REPEATS if args.quick else DEFAULT_REPEATS)
    max_tokens = args.max_tokens or (QUICK_MAX_TOKENS if args.quick else DEFAULT_MAX_TOKENS)
    kwargs = model_kwargs(args)
    note(layers_line(kwargs))
    phases = [Phase("standard", kwargs, max_tokens, names, lambda llm, first_answer: standard(args, first_answer))]
    whole_files = 0 if args.quick or args.workload or args.workloads == "corpus" else args.whole_files
    if whole_files:
        whole_kwargs = dict(kwargs, n_ctx=max(kwargs["n_ctx"], WHOLE_FILE_N_CTX))
        phases.append(Phase("whole-file", whole_kwargs, WHOLE_FILE_MAX_TOKENS, names,
                            lambda llm, first_answer: whole_file_workloads(args.seed, whole_files)))
    record = dict(command=command_line(servers), machine=machine(), model=kwargs["model_path"],
                  threads=args.threads, max_draft=args.max_draft, temperature=args.temperature, repeats=repeats, memory=args.memory,
                  corpus=args.corpus, workload_set=args.workloads,
                  workloads=[], phases={})
    for phase in phases:
        result = run_phase(args, phase, repeats, servers)
        record["phases"][phase.name] = result["record"]
        record["workloads"] += result["workloads"]
        if phase.name == "standard":  # what --replay and --plot read
            record.update(cost_curve=result["record"]["cost_curve"], summary=result["summary"])
            plot_args = (result["summary"], result["kinds"], result["record"]["oracle"]["speedup"])
    if args.json:
        write_json(args.json, record)
    if args.plot:
        os.makedirs(os.path.dirname(os.path.abspath(args.plot)), exist_ok=True)
        bench_report.plot(args.plot, *plot_args)
        note(f"wrote {args.plot}")
    return 0


def command_line(servers=None) -> str:
    """The command that ran, as the record keeps it."""
    return " ".join([getattr(servers, "prog", "plookup"), *sys.argv[1:]])


def cmd_concurrency(args: argparse.Namespace, servers=None) -> int:
    from .concurrency import cmd_concurrency as run
    from .concurrency import parse_kinds, plot

    try:
        levels = [int(c) for c in args.concurrency.split(",") if c]
    except ValueError:
        raise ValueError(f"--concurrency takes a comma-separated list of client counts, got {args.concurrency!r}") from None
    if not levels or min(levels) < 1:
        raise ValueError("--concurrency: every client count must be >= 1")
    parse_kinds(args.kinds)  # before any model loads
    if args.rounds < 1:
        raise ValueError("--rounds: every client sends at least one request")
    args.max_tokens = args.max_tokens or QUICK_MAX_TOKENS
    kwargs = model_kwargs(args)
    note(layers_line(kwargs))
    record = dict(command=command_line(servers), machine=machine(), model=kwargs["model_path"],
                  threads=args.threads, max_draft=args.max_draft, concurrency=run(args, kwargs, levels, note, servers))
    if args.json:
        write_json(args.json, record)
    if args.plot:
        os.makedirs(os.path.dirname(os.path.abspath(args.plot)), exist_ok=True)
        plot(args.plot, record["concurrency"])
        note(f"wrote {args.plot}")
    return 0


def standard(args: argparse.Namespace, first_answer) -> list:
    from .workloads import bench_workloads, corpus_workloads, load_jsonl

    if args.workload:
        return load_jsonl(args.workload)
    if args.workloads == "corpus":
        return corpus_workloads(args.seed)
    return bench_workloads(first_answer, args.seed, args.quick)


def run_phase(args: argparse.Namespace, phase: Phase, repeats: int, servers=None) -> dict:
    """Measure the reference, run the systems, print the tables; return the phase's figures."""
    note(f"{phase.name} workloads: n_ctx {phase.kwargs['n_ctx']}, up to {phase.max_tokens} tokens each")
    reference = measure_reference(args, phase)
    systems = list(phase.systems)
    logits_bytes = 4 * reference.n_vocab * phase.kwargs["n_ctx"]
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    limit = PLD_MEMORY_SHARE * memory
    if "pld" in systems and logits_bytes > limit:
        systems.remove("pld")  # llama_cpp's speculative path keeps logits for every context position
        note(f"skipping pld here: its logits_all buffer (n_vocab {reference.n_vocab} x n_ctx "
             f"{phase.kwargs['n_ctx']} x 4 B = {logits_bytes / 2**30:.1f} GiB) is more than "
             f"{PLD_MEMORY_SHARE:.0%} of this machine's memory ({memory / 2**30:.0f} GiB)")
    runs = run_systems(args, systems, phase, reference, repeats, servers)
    kinds = reference.kinds
    summary = {s: {w: summarize(runs[s][w], *reference.outputs[w]) for w in kinds} for s in runs}
    best_n, oracle = oracle_speedup(reference.cost)
    overview = system_overview(summary, kinds, oracle)
    pairs = pairwise_speedups(summary, list(kinds))
    print(f"\n== {phase.name} workloads (n_ctx {phase.kwargs['n_ctx']}, up to {phase.max_tokens} tokens) ==")
    bench_report.print_results(summary, kinds, reference.cost, (best_n, oracle), overview, pairs,
                               reference.bounds, reference.drafter_us)
    workloads = [dict(name=w.name, kind=w.kind, messages=w.messages, prompt_tokens=reference.prompts[w.name],
                      reference_tokens=reference.outputs[w.name][0], gaps=reference.outputs[w.name][1])
                 for w in reference.workloads]
    record = dict(
        n_ctx=phase.kwargs["n_ctx"], max_tokens=phase.max_tokens, systems=systems,
        drafter_us_per_step=reference.drafter_us, cost_curve=reference.cost.tolist(),
        oracle=dict(best_n=best_n, speedup=oracle), replay_bounds=reference.bounds,
        summary=summary, overview=overview, pairwise=pairs,
        runs={s: {w: [{k: v for k, v in r.items() if k != "tokens"} for r in rs] for w, rs in per.items()}
              for s, per in runs.items()},
    )
    return dict(record=record, workloads=workloads, summary=summary, kinds=kinds)


def measure_reference(args: argparse.Namespace, phase: Phase) -> Reference:
    """Workloads, plain greedy decoding of each, the cost curve, replay bounds and drafter timing,
    all with one plain llama_cpp.Llama that is gone before the systems start."""
    from .drafter_timing import drafter_costs
    from .plain import chat_prompt_tokens, greedy_with_gaps

    llm = plain_llama(phase.kwargs)

    def first_answer(messages):
        tokens, _ = greedy_with_gaps(llm, chat_prompt_tokens(llm, messages), phase.max_tokens)
        return llm.detokenize(tokens).decode("utf-8", "replace").strip()

    note("preparing workloads and plain greedy references")
    workloads = phase.workloads(llm, first_answer)
    prompts = {w.name: chat_prompt_tokens(llm, w.messages) for w in workloads}
    outputs = {name: greedy_with_gaps(llm, prompt, phase.max_tokens) for name, prompt in prompts.items()}
    note("measuring the verify-cost curve")
    cost = measure_cost_curve(llm, max_n=args.max_draft + 1)
    kinds = {w.name: w.kind for w in workloads}
    cases = [(name, prompts[name], outputs[name][0]) for name in prompts]
    bounds = replay_bounds(cases, kinds, cost, args.max_draft)
    note("timing the drafters without the model")
    drafter_us = drafter_costs(llm, REPLAY_DRAFTERS, args.max_draft)
    reference = Reference(workloads, prompts, outputs, cost, bounds, drafter_us, llm.token_eos(), llm.n_vocab())
    llm.close()  # now, not when collected: an RPC server serves the next system only once it is gone
    return reference


def run_systems(args, names, phase: Phase, reference: Reference, repeats: int, servers=None) -> dict:
    """runs[system][workload]: every system in a worker process (the `servers`' in their own),
    taking turns on each workload. Over RPC servers, which serve one client at a time, each system
    is loaded alone instead, run on every workload and closed before the next: a drift of the
    machine's load then lands on one system instead of being shared."""
    from .systems import WorkerSystem

    def worker(name):
        note(f"starting {name}")
        return WorkerSystem(name, phase.kwargs, args.max_draft, args.temperature, args.memory, args.corpus)

    starts = [functools.partial(worker, name) for name in names]
    starts += servers.single_stream(phase.kwargs, reference.eos) if servers else []
    groups = [[start] for start in starts] if phase.kwargs.get("rpc_servers") else [starts]
    progress, runs = None, {}
    for group in groups:
        systems = []
        try:
            for start in group:
                systems.append(start())
            # Timed from when the first systems are up: the time left is the runs' (and later loads').
            progress = progress or bench_report.Progress(repeats * len(reference.prompts) * len(starts))
            runs |= run_interleaved(systems, reference.prompts, phase.max_tokens, repeats,
                                    lambda s, w: progress.step(f"{s} {w}"))
        finally:
            for system in systems:
                system.close()
    progress.finish()
    return runs


def replay_bounds(cases, kinds: dict[str, str], cost, max_draft: int) -> dict[str, dict[str, float]]:
    """Per drafter, over the copy cases: the geometric-mean modelled speedup of its drafts on the
    recorded outputs, and the bound of any draft-length policy with its candidates (best_lengths)."""

    bounds = {}
    for drafter_name in REPLAY_DRAFTERS:
        modelled, oracle = [], []
        for name, prompt, output in cases:
            if kinds[name] == "copy":
                make = lambda: make_drafter(drafter_name, max_draft, cost_curve=cost)  # noqa: E731
                _, m, o = replay_speedups(make, prompt, output, cost)
                modelled.append(m)
                oracle.append(o)
        if modelled:
            bounds[drafter_name] = dict(modelled=geometric_mean(modelled), oracle_length=geometric_mean(oracle))
    return bounds


def given_cost_curve(spec: str, max_draft: int) -> np.ndarray:
    """``--cost-curve``: "flat", or the first curve in a JSON file: a list of costs, or a file
    holding one under "cost_curve" (plookup bench) or "cost" (plookup doctor, a cached curve)."""
    from ...draft.policy import validate_cost_curve

    if spec == "flat":
        return np.ones(max_draft + 1)

    def find(value):
        if isinstance(value, list) and value and all(isinstance(v, (int, float)) for v in value):
            return value
        children = [value.get("cost_curve"), value.get("cost"), *value.values()] if isinstance(value, dict) else (
            value if isinstance(value, list) else [])
        return next((c for c in map(find, children) if c is not None), None)

    try:
        with open(spec, encoding="utf-8") as f:
            curve = find(json.load(f))
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"--cost-curve {spec}: {e}") from None
    if curve is None:
        raise ValueError(f"--cost-curve {spec}: no cost curve in it (a list of numbers, or one under 'cost_curve' or 'cost')")
    try:
        return validate_cost_curve(curve)
    except ValueError as e:
        raise ValueError(f"--cost-curve {spec}: {e}") from None


def cmd_replay(args: argparse.Namespace) -> int:
    cases, cost = load_recorded(args.replay)
    if args.cost_curve:
        cost = given_cost_curve(args.cost_curve, args.max_draft)
        note(f"costing the drafts with {args.cost_curve}: {' '.join(f'{c:.2f}' for c in cost)}")
    header = ["workload", "drafter", "tokens", "drafted", "accepted", "mean acc", "passes/tok"]
    # With the recorded cost curve: the drafter's speed, and the best any draft-length policy could
    # reach with the same candidates (an oracle's cheapest lengths, replay.best_lengths).
    header += ["modelled x", "oracle-length x"] if cost is not None else []
    rows = []
    for drafter_name in REPLAY_DRAFTERS:
        for name, prompt, output in cases:
            make = lambda: make_drafter(drafter_name, args.max_draft, cost_curve=cost)  # noqa: E731
            if cost is not None:
                stats, modelled, oracle = replay_speedups(make, prompt, output, cost)
            else:
                stats, _ = replay(make(), prompt, output)
            steps_with_draft = stats.drafted_per_position[0] if stats.drafted_per_position else 0
            row = [name, drafter_name, str(stats.generated), str(stats.drafted), str(stats.accepted),
                   f"{stats.accepted / steps_with_draft if steps_with_draft else 0:.2f}",
                   f"{stats.forward_passes / max(1, stats.generated):.2f}"]
            if cost is not None:
                row += [f"{modelled:.2f}", f"{oracle:.2f}"]
            rows.append(row)
    print(bench_report.grid(header, rows))
    return 0


def machine() -> dict:
    import llama_cpp

    return dict(platform=platform.platform(), processor=platform.processor(), cpus=os.cpu_count(),
                llama_cpp_python=llama_cpp.__version__,
                system_info=llama_cpp.llama_print_system_info().decode())


def write_json(path: str, record: dict) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1)
    note(f"wrote {path}")
