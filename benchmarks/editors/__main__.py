"""python -m benchmarks.editors: llama.vim's requests over HTTP, against llama-server and `plookup
serve`, each started here in a process of its own, one at a time (see benchmarks/editors/llama_vim.py
and llama_vim_session.py). Run from a checkout, with plookup installed:

    python -m benchmarks.editors -m MODEL --editor fim,instruct [--llama-server PATH] [--json OUT]
    python -m benchmarks.editors -m MODEL --editor session --editor-systems llama-server,plookup ...
    python -m benchmarks.editors --editor-report A.json B.json...    # no model: the merged tables
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import sys
from typing import Optional

from plookup import log
from plookup.api.rpc_check import RpcError
from plookup.app.bench.command import machine, write_json
from plookup.app.options import add_model_options, layers_line, model_kwargs

from .llama_vim import BUDGETS_MS, SWEEP_SYSTEM, SYSTEMS, WORKLOADS
from .llama_vim import cmd_editor as run
from .llama_vim import merge, parse_budgets, parse_list, parse_systems, print_tables
from .llama_vim_session import SAMPLINGS, plot_session, print_session, run_session_workload

PROG = "python -m benchmarks.editors"


def note(message: str) -> None:
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)


def parser() -> argparse.ArgumentParser:
    editors = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                      formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_options(editors)
    editors.add_argument("--editor", metavar="LIST",
                         help=f"of {', '.join(WORKLOADS)}: fim (/infill at llama.vim's 250 and 1000 ms budgets and "
                              "without one), instruct (iterated edits on /v1/chat/completions), session (a user "
                              "typing functions with llama.vim, live on each system)")
    editors.add_argument("--llama-server", metavar="PATH", help="llama-server binary (default: from PATH)")
    editors.add_argument("--seed", type=int, default=0, help="seed of the cases and of the typing user")
    editors.add_argument("--fim-cases", type=int, default=16, metavar="N",
                         help="with --editor fim: cursor positions cut from PyPI release files (default 16)")
    editors.add_argument("--fim-chunks", type=int, default=8, metavar="N",
                         help="input_extra chunks of other files a request carries (default 8; llama.vim's ring "
                              "holds up to 16)")
    editors.add_argument("--fim-budgets", metavar="LIST", default=",".join([*map(str, BUDGETS_MS), "none"]),
                         help="with --editor fim: the t_max_predict_ms passes, in order, none for no budget "
                              "(default %(default)s; `none` alone measures decoding only, in a third of the time)")
    editors.add_argument("--instruct-sessions", type=int, default=3, metavar="N",
                         help="with --editor instruct: functions edited (default 3)")
    editors.add_argument("--instruct-turns", type=int, default=3, metavar="K",
                         help="with --editor instruct: instructions a session sends, each on the last answer "
                              "(default 3)")
    editors.add_argument("--session-tasks", type=int, metavar="N",
                         help="with --editor session: functions the user types (default 3)")
    editors.add_argument("--session-repeats", type=int, metavar="N",
                         help="with --editor session: runs of each system, the order reversed every other "
                              "(default 3)")
    editors.add_argument("--session-sampling", type=lambda text: parse_list(text, SAMPLINGS, "--session-sampling"),
                         metavar="LIST", help="with --editor session: of sampled (llama.vim's samplers, seeded; "
                                              "the default), greedy")
    editors.add_argument("--editor-systems", metavar="LIST",
                         help=f"only these systems, of: {', '.join(SYSTEMS)}, and {SWEEP_SYSTEM} (llama-server "
                              "with its n-gram drafter SPEC up to N tokens, for a sweep; e.g. to run them in turns, "
                              "then --editor-report)")
    editors.add_argument("--editor-log", metavar="FILE", help="append the servers' output to FILE")
    editors.add_argument("--editor-report", metavar="FILE", nargs="+",
                         help="no model: print the tables of runs' --json files, merged")
    editors.add_argument("--json", metavar="FILE", help="write every request, answer and figure as JSON")
    editors.add_argument("--plot", metavar="FILE.png", help="with --editor session: write its chart")
    return editors


def find_llama_server(path: Optional[str]) -> Optional[str]:
    """The llama-server binary, or None (said: its systems are left out)."""
    binary = shutil.which(path) if path else shutil.which("llama-server")
    if binary is None:
        note(f"skipping llama-server systems: {path or 'llama-server on PATH'} not found "
             "(give one with --llama-server PATH; `make llama-server` builds one)")
    return binary


def cmd_editor(args: argparse.Namespace) -> int:
    if args.rpc:
        raise ValueError("--rpc: the editors' servers are started one at a time, each loading the model itself")
    for name in ("fim_cases", "fim_chunks", "instruct_sessions", "instruct_turns"):
        if getattr(args, name) < (0 if name == "fim_chunks" else 1):
            raise ValueError(f"--{name.replace('_', '-')}: too small")
    parse_list(args.editor, WORKLOADS, "--editor")  # before the model is looked for
    if args.editor_systems:
        parse_systems(args.editor_systems)
    parse_budgets(args.fim_budgets)
    kwargs = model_kwargs(args)
    note(layers_line(kwargs))
    server = find_llama_server(args.llama_server)
    record = run(args, kwargs, note, server, machine(),
                 run_session=lambda wanted: run_session_workload(args, kwargs, note, server, wanted))
    if record.get("session"):
        print_session(record["session"])
        if args.plot and record["session"].get("runs"):
            os.makedirs(os.path.dirname(os.path.abspath(args.plot)), exist_ok=True)
            plot_session(args.plot, record["session"])
            note(f"wrote {args.plot}")
    if args.json:
        write_json(args.json, record)
    return 0


def cmd_editor_report(args: argparse.Namespace) -> int:
    records = []
    for path in args.editor_report:
        # docs/ keeps the recorded runs gzipped
        with (gzip.open if path.endswith(".gz") else open)(path, "rt", encoding="utf-8") as f:
            records.append(json.load(f))
    record = merge(records)
    print_tables(record)
    if record.get("session"):
        print_session(record["session"])
    if args.json:
        write_json(args.json, record)
    return 0


def main(argv: Optional[list[str]] = None) -> int:
    args = parser().parse_args(argv)
    log.to_stderr(args.quiet)
    try:
        if args.editor_report:
            return cmd_editor_report(args)
        if not args.editor:
            raise ValueError("give --editor LIST (of fim, instruct, session), or --editor-report FILE...")
        return cmd_editor(args)
    except (ValueError, FileNotFoundError, RpcError) as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
