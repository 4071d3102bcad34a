"""Where four clients' wall goes, step by step, on both servers: one run of examples/four_clients.py
per system, with each server's own record of its decodes.

    python examples/four_clients_profile.py LLAMA_SERVER OUT_DIR [SYSTEM ...] [-- PLOOKUP_FLAGS ...]

SYSTEM: names of four_clients.SYSTEMS, in the order to run them (default: each once). plookup's
record is its engine's step trace (``Llama.trace_steps``: rows, prompt tokens, drafts, seconds
inside llama_decode and around it), written by its server process when it is stopped; llama-server's
is its ``-v`` log, read back into the same terms: each ``decode:`` line starts a step, whose rows are
the slots' sampled tokens, drafts and new prompt tokens logged before it, and whose time runs to the
next one. The summary splits each run into the steps that carry prompt tokens and those that only
decode. PLOOKUP_FLAGS go to `plookup serve` (e.g. ``-fa off``). Output: OUT_DIR/<run>.json (answers
and steps) and the summary on stdout.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import four_clients  # noqa: E402  (this folder's)

from plookup.app.models import resolve_model  # noqa: E402


def serve_traced(out: str, argv: list[str]) -> None:
    """`plookup serve ARGV` recording every engine step, written to `out` at SIGTERM (uvicorn
    restores this handler once it has shut down, and raises the signal again)."""
    from plookup.app import cli
    from plookup.app.serve import command

    loaded = {}
    load = command.load_llama

    def load_traced(*args, **kwargs):
        llm = loaded["llm"] = load(*args, **kwargs)
        llm.trace_steps(True)
        return llm

    def dump(*_):
        with open(out, "w", encoding="utf-8") as f:
            json.dump([dataclasses.asdict(step) for step in loaded["llm"].traced_steps()], f)
        os._exit(0)

    command.load_llama = load_traced
    signal.signal(signal.SIGTERM, dump)
    sys.exit(cli.main(argv))


def start(system: str, binary: str, model: str, log_path: str, trace_path: str, flags: list[str]):
    """four_clients.start, recording: llama-server with -v, plookup through :func:`serve_traced`
    with `flags`; each one's stderr in `log_path`."""

    def recording(command: list[str]) -> list[str]:
        if system.startswith("llama-server"):
            return [*command, "-v"]
        cli = len(four_clients.PLOOKUP_CLI)
        return [sys.executable, __file__, "--serve-traced", trace_path, *command[cli:], *flags]

    with open(log_path, "w", encoding="utf-8") as log:
        return four_clients.start(system, binary, model, recording, log)


def log_steps(path: str) -> list[dict]:
    """llama-server's decodes from its -v log: rows (sampled tokens, drafts, new prompt tokens
    logged since the previous decode), prompt tokens, and seconds to the next decode."""

    def seconds(line: str) -> float:  # "M.SS.mmm.uuu" at the line's start
        m, s, ms, us = (int(x) for x in line.split()[0].split("."))
        return 60 * m + s + ms / 1e3 + us / 1e6

    steps, rows, prompt, cached = [], 0, 0, 0
    with open(path, encoding="utf-8", errors="replace") as log:
        for line in log:
            if "slot decode token" in line:
                rows += 1
            elif found := re.search(r"#draft=(\d+)", line):
                rows += int(found[1])
            elif found := re.search(r"cached n_tokens = (\d+)", line):
                cached = int(found[1])
            elif found := re.search(r"init_sampler.*tokens: text = (\d+)", line):
                prompt += int(found[1]) - cached
            elif "n_batch (effective)" in line:
                steps.append({"at": seconds(line), "rows": rows + prompt, "prefilled": prompt})
                rows, prompt = 0, 0
    for step, after in zip(steps, steps[1:]):
        step["seconds"] = after["at"] - step["at"]
    return steps[:-1]  # the last one's end is not logged


def trace_steps(path: str) -> list[dict]:
    return [{"rows": s["rows"], "prefilled": s["prefilled"], "decode": s["decode"],
             "seconds": s["host_before"] + s["decode"] + s["host_after"]} for s in json.load(open(path))]


def summary(steps: list[dict]) -> str:
    def part(chosen):
        return (f"{len(chosen):3d} steps, {sum(s['rows'] for s in chosen):5d} rows, "
                f"{sum(s['seconds'] for s in chosen):6.2f} s")

    return (f"steps with prompt tokens: {part([s for s in steps if s['prefilled']])} | "
            f"decoding only: {part([s for s in steps if not s['prefilled']])}")


def main() -> None:
    if sys.argv[1] == "--serve-traced":
        serve_traced(sys.argv[2], sys.argv[3:])
    argv = sys.argv[1:]
    flags = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    binary, out_dir, systems = argv[0], argv[1], argv[2:] or list(four_clients.SYSTEMS)
    os.makedirs(out_dir, exist_ok=True)
    model = resolve_model("qwen-coder-0.5b:q8_0")
    for i, system in enumerate(systems):
        tag = os.path.join(out_dir, f"{i}-{system.replace(' ', '_')}")
        process, url = start(system, binary, model, tag + ".log", tag + "-trace.json", flags)
        try:
            four_clients.ask(url, [{"role": "user", "content": "hi"}])  # warm, as four_clients.py
            result = four_clients.run(url, four_clients.code_edits())
        finally:
            process.terminate()
            process.wait(timeout=60)
        steps = log_steps(tag + ".log") if system.startswith("llama-server") else trace_steps(tag + "-trace.json")
        with open(tag + ".json", "w", encoding="utf-8") as f:
            json.dump({"system": system, "flags": flags, **result, "steps": steps}, f, indent=1)
        print(f"{system:26s} wall {result['wall']:5.1f} s, {result['tokens']} tokens; {summary(steps)}", flush=True)


if __name__ == "__main__":
    main()
