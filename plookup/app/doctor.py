"""`plookup doctor`: for this model, build and machine, what speculation can gain and whether it is exact.

Each runtime setting of :data:`plookup.measure.exactness.SETTINGS_TO_PROBE` is measured in a fresh process
(ggml reads its tiled-kernel switch once per process): batch invariance of single-draft and
two-branch verify batches, the verify-cost curve and its always-right ceiling, prompt and decode
speed. The report is kept per model and build, where plookup.Llama finds the settings that make
its verification exact, and the advice (:func:`plookup.measure.exactness.advise`) is printed.

``--max-draft N`` measures verify batches of up to N + 1 rows (default: drafts' own bound, 64):
the probes, the curve and its ceiling stop there, which is quicker, and is what a model run with
that --max-draft verifies. Whether a setting is exact is decided on its first EXACT_MIN_ROWS
(17) rows for any N from 16 up, so such a run's verdicts are the default's; plookup.Llama
probes its own drafts' bound again when it loads.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import traceback
from collections import Counter
from dataclasses import asdict

from ..draft.drafters import check_max_draft
from ..measure.costs import DEFAULT_MAX_N, measure_cost_curve, oracle_speedup
from ..measure.exactness import (
    BACKEND_MARGIN,
    SETTINGS_TO_PROBE,
    TILED_ENV,
    Settings,
    advise,
    backend_walls,
    llamafile_in_build,
    load_report,
    measure_speeds,
    probe_invariance,
    probe_slots,
    save_report,
)
from .models import quantized_path, resolve_model
from .options import add_model_options
from .tables import grid, notes

note = notes("doctor")


def register(commands) -> None:
    doctor = commands.add_parser(
        "doctor", help="what speculation gains here, and whether its output is exact, for one model",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_model_options(doctor)
    doctor.add_argument("--quants", default="", metavar="Q,Q",
                        help="also measure these requantizations of the model, e.g. q8_0,q4_0")
    doctor.add_argument("--json", metavar="FILE", help="write the report as JSON")
    doctor.set_defaults(func=cmd_doctor)


def cmd_doctor(args: argparse.Namespace) -> int:
    if args.rpc:
        # Its report is kept per model file and applied to every later local load of it.
        raise ValueError("--rpc: the doctor measures a model on this host only, for now")
    path = resolve_model(args.model)
    if check_max_draft(args.max_draft) < 1:
        raise ValueError("--max-draft: the doctor measures verify batches, of at least one draft token")
    quants = [q for q in args.quants.split(",") if q]
    report = diagnose(path, args.threads, args.n_ctx, quants, max_n=args.max_draft + 1)
    save_report(path, report)
    print(render(report))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1)
    return 0


def diagnose(path: str, threads: int, n_ctx: int, quants: list[str], max_n: int = DEFAULT_MAX_N) -> dict:
    """The doctor's report for the model file `path` (every figure measured now), verify batches
    of up to max_n rows (the pending token and the longest draft)."""
    import llama_cpp

    report = dict(
        model=path, tensor_types=tensor_types(path), llamafile=llamafile_in_build(),
        llama_cpp_python=llama_cpp.__version__, system_info=llama_cpp.llama_print_system_info().decode().strip(),
        threads=threads, max_n=max_n, configs=[],
    )
    report["quant"] = file_type(report["tensor_types"])
    for i, settings in enumerate(SETTINGS_TO_PROBE, 1):
        note(f"[{i}/{len(SETTINGS_TO_PROBE)}] {settings.label()}")
        report["configs"].append(in_fresh_process(path, settings, threads, n_ctx, max_n))
    report["quants"] = {}
    for quant in quants:
        note(f"requantized to {quant}")
        measured = in_fresh_process(str(quantized_path(path, quant)), Settings(), threads, n_ctx, max_n)
        report["quants"][quant] = measured["ceiling"]
    # The same model measured in the other build (`make EXACT=1` or not), when the doctor ran there.
    report["advice"] = advise(report, load_report(path, llamafile=not report["llamafile"]))
    return report


def tensor_types(path: str) -> dict[str, int]:
    """How many tensors of each type the GGUF file holds (read with the gguf package)."""
    from gguf import GGUFReader

    return dict(Counter(tensor.tensor_type.name for tensor in GGUFReader(path).tensors).most_common())


def file_type(types: dict[str, int]) -> str:
    """The most common quantized weight type, e.g. Q4_K (what the file mostly is)."""
    quantized = {t: n for t, n in types.items() if t not in ("F32", "F16", "BF16")}
    return max(quantized, key=quantized.get) if quantized else next(iter(types), "?")


def measure_settings(path: str, settings: Settings, threads: int, n_ctx: int, max_n: int = DEFAULT_MAX_N) -> dict:
    """Everything the doctor reports for one setting (run it in a fresh process), verify batches
    of up to max_n rows: the probes, the cost curve, and the drafts of the host measurement."""
    os.environ[TILED_ENV] = "1" if settings.tiled else "0"
    from ..api.llama import Llama  # the probe needs plookup's two-sequence context

    llm = Llama(path, n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads, verbose=False, flash_attn=settings.flash_attn,
                use_extra_bufts=settings.repack, cost_curve=None, exactness=None, backend_sampling=False,
                max_draft=max_n - 1)
    invariance = probe_invariance(llm, max_n)
    slots = probe_slots(llm, max_n)
    cost = measure_cost_curve(llm, max_n)
    best_n, ceiling = oracle_speedup(cost)
    prompt_tps, decode_tps = measure_speeds(llm)
    backend = measure_backend_sampling(llm)
    return dict(host=backend["host"], backend_sampling=backend,
        # Exact as plookup.Llama claims it: drafts kept within the batch sizes found exact.
        settings=asdict(settings), invariant=invariance.exact_within(max_n) is not None,
        exact_rows=invariance.exact_rows, summary=invariance.summary(),
        single_rows=invariance.rows(two_branch=False), branch_rows=invariance.rows(two_branch=True),
        max_delta=max(c.max_delta for c in invariance.checks), checks=[asdict(c) for c in invariance.checks],
        cost=cost.tolist(), best_n=best_n, ceiling=ceiling, prompt_tps=prompt_tps, decode_tps=decode_tps,
        slot_rows={layout: (sum(c.equal for c in slots if c.layout == layout), sum(c.rows for c in slots if c.layout == layout))
                   for layout in ("unified", "streams")},
    )


def measure_host(llm, tokens: int = 48) -> dict:
    """Host µs outside llama_decode per generated token and per decode, ms inside a decode, and
    wall ms per token: drafting nothing (random tokens), and drafting (a prompt that repeats)."""
    import time

    import numpy as np

    from ..draft.values import PLAIN
    from ..measure.clock import DecodeClock

    clock = DecodeClock(llm)
    random = np.random.default_rng(2).integers(100, llm.n_vocab(), 64).tolist()
    cases = {"no draft": (random, PLAIN), "drafting": (list(range(300, 340)) * 3, None)}
    out = {}
    try:
        for name, (prompt, speculative) in cases.items():
            llm.prefill(prompt, temp=0.0, repeat_penalty=1.0)  # not eval: see Llama.prefill
            clock.reset()
            start = time.perf_counter()
            with llm.request(speculative=speculative):
                for n, _ in enumerate(llm.generate(prompt, temp=0.0, repeat_penalty=1.0), 1):
                    if n >= tokens:
                        break
            wall = time.perf_counter() - start
            host = wall - clock.decode_seconds
            out[name] = dict(us_per_token=1e6 * host / tokens, us_per_decode=1e6 * host / clock.decodes,
                             decode_ms=1e3 * clock.decode_seconds / clock.decodes, ms_per_token=1e3 * wall / tokens)
    finally:
        llm.reset()
    return out


def measure_backend_sampling(llm, rounds: int = 3) -> dict:
    """:func:`measure_host` with greedy rows sampled on the host and on the backend
    (:mod:`plookup.verify.backend`), rounds interleaved, the fastest round of each (interference
    from the rest of the machine only ever adds time: one slow round in two made a median of 2
    say the backend was 22% faster). `pays`: the backend's wall time per token, both cases
    together, at least BACKEND_MARGIN below the host's."""
    own = llm.backend_sampling
    runs: dict[str, list] = {"host": [], "backend": []}
    try:
        for _ in range(rounds):
            for name, rows in runs.items():
                llm.backend_sampling = name == "backend"
                rows.append(measure_host(llm))
    finally:
        llm.backend_sampling = own
    out: dict = {
        name: {case: min((r[case] for r in rows), key=lambda m: m["ms_per_token"]) for case in rows[0]}
        for name, rows in runs.items()
    }
    host, backend = backend_walls(out)
    out["pays"] = bool(backend < (1 - BACKEND_MARGIN) * host)
    return out


def _worker(conn, *args) -> None:
    try:
        conn.send(("ok", measure_settings(*args)))
    except Exception:  # reported to the parent with its traceback, which raises it
        conn.send(("error", traceback.format_exc()))


def in_fresh_process(path: str, settings: Settings, threads: int, n_ctx: int, max_n: int = DEFAULT_MAX_N) -> dict:
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    process = context.Process(target=_worker, args=(child, path, settings, threads, n_ctx, max_n), daemon=True)
    process.start()
    try:
        status, value = parent.recv()
    except EOFError:
        raise RuntimeError(f"the measurement of {settings.label()} died (exit code {process.exitcode})") from None
    finally:
        process.join(timeout=30)
    if status == "error":
        raise RuntimeError(f"{settings.label()}: {value}")
    return value


def render(report: dict) -> str:
    types = ", ".join(f"{t} {n}" for t, n in report["tensor_types"].items())
    header = ("setting", "exact", "single rows", "two-branch rows", "beside a 2nd slot: unified / streams", "max |Δ|",
              "ceiling", "prompt tok/s", "decode tok/s", "host us/tok: no draft | drafting, per step",
              "greedy ms/tok: host -> backend sampling")
    rows = []
    for c in report["configs"]:
        rows.append((
            Settings(**c["settings"]).label(), "yes" if c["invariant"] else "no",
            "{}/{}".format(*c["single_rows"]), "{}/{}".format(*c["branch_rows"]), _slot_rows(c), f"{c['max_delta']:.2g}",
            f"{c['ceiling']:.2f}x (n={c['best_n']})", f"{c['prompt_tps']:.0f}", f"{c['decode_tps']:.1f}", _host(c), _backend(c),
        ))
    lines = [
        f"model: {report['model']}",
        f"  tensors: {types}",
        f"build: llama-cpp-python {report['llama_cpp_python']}; {report['system_info']}",
        f"threads: {report['threads']}",
        "",
        grid(header, rows),
    ]
    for quant, ceiling in report.get("quants", {}).items():
        lines.append(f"  requantized to {quant}: ceiling {ceiling:.2f}x")
    lines += ["", "advice:"] + [f"- {line}" for line in report["advice"]]
    return "\n".join(lines)


def _host(config: dict) -> str:
    """Host time per token outside llama_decode, beside the decode's own time."""
    host = config.get("host")  # (reports saved before it was measured lack it)
    if not host:
        return "-"
    free, drafting = host["no draft"], host["drafting"]
    return (f"{free['us_per_token']:.0f} ({free['decode_ms']:.1f} ms a decode) | "
            f"{drafting['us_per_token']:.0f}, {drafting['us_per_decode']:.0f}")


def _backend(config: dict) -> str:
    """Wall ms per token, no draft | drafting, with greedy rows sampled on the host and the backend."""
    measured = config.get("backend_sampling")  # (reports saved before it was measured lack it)
    if not measured:
        return "-"
    host, backend = measured["host"], measured["backend"]
    return " | ".join(f"{host[case]['ms_per_token']:.2f} -> {backend[case]['ms_per_token']:.2f}" for case in host)


def _slot_rows(config: dict) -> str:
    """A slot's rows in a batch beside another slot's, bitwise equal to decoding it alone."""
    slots = config.get("slot_rows")  # (reports saved before the engine had slots lack it)
    return " / ".join("{}/{}".format(*slots[k]) for k in ("unified", "streams")) if slots else "-"


