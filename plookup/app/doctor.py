"""`plookup doctor`: for this model, build and machine, what speculation can gain and whether it is exact.

Each runtime setting of :data:`plookup.measure.settings.SETTINGS_TO_PROBE` is measured in a fresh process
(ggml reads its tiled-kernel switch once per process): batch invariance of single-draft and
two-branch verify batches, the verify-cost curve and its always-right ceiling, prompt and decode
speed. The report is kept per model and build, where plookup.Llama finds the settings that make
its verification exact, and the advice drawn from it (:func:`advise`) is printed.

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
from typing import Optional

from ..draft.index_drafter import check_max_draft
from ..measure.costs import DEFAULT_MAX_N, measure_cost_curve, oracle_speedup
from ..measure.exactness import probe_invariance, probe_slots
from ..measure.settings import (
    SETTINGS_TO_PROBE,
    TILED_ENV,
    Settings,
    exact_setting,
    llamafile_in_build,
    load_report,
    save_report,
)
from ..measure.speeds import BACKEND_MARGIN, backend_walls, measure_backend_sampling, measure_speeds
from .models import quantized_path
from .options import add_model_options, layers_line, model_kwargs
from .tables import grid, notes

note = notes("doctor")

# llama_cpp's arguments from the model options that every load of the doctor takes as given (-ngl,
# -b, ...); the settings it probes (flash attention, repacking, tiling) are its own.
LOAD_OPTIONS = ("n_threads_batch", "n_gpu_layers", "n_batch", "n_ubatch", "type_k", "type_v", "use_mmap", "use_mlock")


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
    kwargs = model_kwargs(args)
    path, load = kwargs["model_path"], {k: kwargs[k] for k in LOAD_OPTIONS if k in kwargs}
    if check_max_draft(args.max_draft) < 1:
        raise ValueError("--max-draft: the doctor measures verify batches, of at least one draft token")
    if args.rpc:
        return over_rpc(path, args, kwargs["n_ctx"], load)
    quants = [q for q in args.quants.split(",") if q]
    report = diagnose(path, args.threads, kwargs["n_ctx"], quants, max_n=args.max_draft + 1, load=load)
    save_report(path, report)
    print(render(report))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1)
    return 0


def over_rpc(path: str, args: argparse.Namespace, n_ctx: int, load: dict) -> int:
    """Over RPC servers, what the link changes: the verify-cost curve measured through them (a pass
    is a round trip, so the curve flattens as the link slows) and its always-right ceiling, cached
    under a key that names the servers, where a later load over them (same threads and context)
    finds it. The file's report (exactness, settings) is about this host's build: neither measured
    nor written."""
    from ..api.llama import Llama
    from ..measure.costs import cached_cost_curve, curve_rows

    llm = Llama(path, **{"n_threads_batch": args.threads, **load}, rpc_servers=args.rpc, n_ctx=n_ctx,
                n_threads=args.threads, verbose=False, cost_curve=None, exactness=None, backend_sampling=False,
                max_draft=args.max_draft)
    try:
        cost = cached_cost_curve(llm, curve_rows(args.max_draft))  # the key a one-slot load reads
        endpoints = list(llm.rpc_devices.endpoints)
    finally:
        llm.close()
    best_n, ceiling = oracle_speedup(cost)
    print(f"model: {path}\nover RPC: {', '.join(endpoints)}\n{layers_line(dict(load, model_path=path, rpc_servers=endpoints))}")
    print("verify cost, in single decodes, of n rows: " + "  ".join(
        f"{n}: {cost[n - 1]:.2f}" for n in (1, 2, 4, 8, 16, 32, 64) if n <= len(cost)))
    print(f"always-right ceiling: {ceiling:.2f}x plain decoding (n={best_n}). Cached: a plookup.Llama loaded over "
          f"these servers with the same threads and context drafts by it. Exactness is not probed over RPC.")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(dict(model=path, rpc=endpoints, cost=cost.tolist(), best_n=best_n, ceiling=ceiling), f, indent=1)
    return 0


def diagnose(path: str, threads: int, n_ctx: int, quants: list[str], max_n: int = DEFAULT_MAX_N,
             load: Optional[dict] = None) -> dict:
    """The doctor's report for the model file `path` (every figure measured now), verify batches
    of up to max_n rows (the pending token and the longest draft); `load`: llama_cpp's arguments
    every load takes (:data:`LOAD_OPTIONS`, e.g. n_gpu_layers)."""
    import llama_cpp

    load = load or {}
    report = dict(
        model=path, tensor_types=tensor_types(path), llamafile=llamafile_in_build(),
        llama_cpp_python=llama_cpp.__version__, system_info=llama_cpp.llama_print_system_info().decode().strip(),
        threads=threads, max_n=max_n, configs=[], layers=layers_line(dict(load, model_path=path)),
    )
    report["quant"] = file_type(report["tensor_types"])
    for i, settings in enumerate(SETTINGS_TO_PROBE, 1):
        note(f"[{i}/{len(SETTINGS_TO_PROBE)}] {settings.label()}")
        report["configs"].append(in_fresh_process(path, settings, threads, n_ctx, max_n, load))
    report["quants"] = {}
    for quant in quants:
        note(f"requantized to {quant}")
        measured = in_fresh_process(str(quantized_path(path, quant)), Settings(), threads, n_ctx, max_n, load)
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


def measure_settings(path: str, settings: Settings, threads: int, n_ctx: int, max_n: int = DEFAULT_MAX_N,
                     load: Optional[dict] = None) -> dict:
    """Everything the doctor reports for one setting (run it in a fresh process), verify batches
    of up to max_n rows: the probes, the cost curve, and the drafts of the host measurement;
    `load`: as :func:`diagnose`'s."""
    os.environ[TILED_ENV] = "1" if settings.tiled else "0"
    from ..api.llama import Llama  # the probe needs plookup's two-sequence context

    llm = Llama(path, **{"n_threads_batch": threads, **(load or {})}, n_ctx=n_ctx, n_threads=threads,
                verbose=False, flash_attn=settings.flash_attn, use_extra_bufts=settings.repack, cost_curve=None,
                exactness=None, backend_sampling=False, max_draft=max_n - 1)
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


def _worker(conn, *args) -> None:
    try:
        conn.send(("ok", measure_settings(*args)))
    except Exception:  # reported to the parent with its traceback, which raises it
        conn.send(("error", traceback.format_exc()))


def in_fresh_process(path: str, settings: Settings, threads: int, n_ctx: int, max_n: int = DEFAULT_MAX_N,
                     load: Optional[dict] = None) -> dict:
    """:func:`measure_settings` in a process of its own (spawned: ggml reads its switches once a
    process), `load` (n_gpu_layers and the rest) passed on to it."""
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    process = context.Process(target=_worker, args=(child, path, settings, threads, n_ctx, max_n, load), daemon=True)
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


# -- the advice: a function of the measured figures alone


def advise(report: dict, other_build: Optional[dict] = None) -> list[str]:
    """Plain words from a doctor report: what speculation can gain here, whether the output is
    exact and how to make it so, and which quantization verifies cheaper.

    `report`: {"llamafile": bool, "configs": [measure_settings() ...] (llama_cpp's defaults first),
    "quants"?: {name: ceiling}, "quant"?: this file's type}. `other_build`: the same model's report
    from the other build (with or without llamafile), when one was measured.
    """
    default = report["configs"][0]
    lines = []
    if default["ceiling"] < 1.05:
        lines.append(f"speculation cannot pay here: verifying n tokens costs about n single decodes "
                     f"(best {default['ceiling']:.2f}x)")
    else:
        lines.append(f"speculation pays here up to {default['ceiling']:.2f}x plain decoding (an always-right "
                     f"drafter verifying {default['best_n']} tokens a step); copy-heavy work gets a share of it")
    exact = exact_setting(report["configs"])
    if default["invariant"]:
        lines.append("output is exact with llama_cpp's default settings: greedy text is bit-identical to "
                     "plain decoding, and sampling keeps the model's distribution exactly")
    elif exact is not None:
        settings = Settings(**exact["settings"])
        lines.append(f"output is exact with {settings.label()}: {_price(default, exact)}; plookup.Llama "
                     f"applies these settings for this model once this report is cached")
    else:
        lines.append(f"output is not exact with this build ({default['summary']}): greedy text may differ "
                     f"from plain decoding where its two best tokens are near-tied")
        if report["llamafile"]:
            lines.append(_exact_build_line(other_build, default))
    if (backend := _backend_line(exact if exact is not None else default)) is not None:
        lines.append(backend)
    quants = report.get("quants") or {}
    if quants:
        best = max(quants, key=quants.get)
        if quants[best] > default["ceiling"] * 1.05:
            current = report.get("quant", "this file")
            lines.append(f"{best.upper()} verifies cheaper than {current} here: ceiling {quants[best]:.2f}x "
                         f"vs {default['ceiling']:.2f}x (requantized from this file: "
                         f"`-m MODEL:{best}`)")
    return lines


def _backend_line(config: dict) -> Optional[str]:
    """Where plookup.Llama samples greedy rows with the settings it loads (see
    :func:`plookup.measure.settings.recommended_backend_sampling`), and why; None where a report
    did not measure it."""
    measured = config.get("backend_sampling")
    if not measured:
        return None
    host, backend = backend_walls(measured)
    change = f"{host:.2f} -> {backend:.2f} ms per token, no draft and drafting together"
    if measured["pays"]:
        return f"greedy rows are sampled on the backend here ({change}); plookup.Llama does so for this model"
    return (f"greedy rows stay on the host: sampling them on the backend does not pay here ({change}, "
            f"at least {BACKEND_MARGIN:.0%} less needed)")


def _price(base: dict, other: dict) -> str:
    return (f"ceiling {base['ceiling']:.2f}x -> {other['ceiling']:.2f}x, prompt "
            f"{base['prompt_tps']:.0f} -> {other['prompt_tps']:.0f} tok/s, decode "
            f"{base['decode_tps']:.0f} -> {other['decode_tps']:.0f} tok/s")


def _exact_build_line(other_build: Optional[dict], default: dict) -> str:
    if other_build is None:
        return ("`make EXACT=1` builds llama.cpp without llamafile, whose batched kernels round "
                "differently; run `plookup doctor` in that build to see whether it makes this model exact")
    exact = exact_setting(other_build["configs"])
    if exact is None:
        return "`make EXACT=1` (without llamafile) does not make this model exact either (measured)"
    settings = Settings(**exact["settings"])
    return (f"`make EXACT=1` makes it exact for this model with {settings.label()}, at the price of "
            f"{_price(default, exact)} (measured)")


# -- the report as text


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
        *([report["layers"]] if report.get("layers") else []),  # (reports saved before -ngl lack it)
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


