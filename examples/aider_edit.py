"""aider (the terminal coding assistant) editing a real file through `plookup serve`, drafting off vs on.

    python examples/aider_edit.py [-m qwen-coder-1.5b] [--formats whole,diff] [--memory] [--json FILE]

What it does, and why:

1. aider gets a venv of its own (``aider-venv`` in plookup's cache folder, made once, aider-chat pinned):
   its many pinned dependencies must not meet plookup's.
2. `plookup serve` runs a coder model on 127.0.0.1, once with drafting off (``--max-draft 0``) and
   once on, so the two runs differ in nothing but speculation.
3. aider renames a parameter of one function in a copy of the standard library's ``bisect.py``
   (110 lines), in the edit formats asked for: ``whole`` has the model write the whole file back,
   the case plookup is made for; ``diff`` has it write SEARCH/REPLACE blocks, copied text too.
4. Per run it reports wall time, completion tokens, forward passes per token and drafted/accepted
   tokens (the server's ``/metrics`` before and after), whether the file still compiles, whether
   the rename was done, and whether drafting off and on left byte-identical files.
5. ``--memory``: three successive aider runs (three renames, whole format) on one file, with the server's
   cross-request memory (``--memory PATH``) vs without: editors resend the whole file every turn.

aider runs offline: every request goes to the local server, its update check, analytics and model
price download are off, HOME is a fresh folder (no user config), and a dead proxy on loopback makes
any other connection fail at once instead of leaving the machine.

Greedy outputs of the two runs are the same tokens until the first near-tie: llama.cpp's batched
kernels round differently from single-token decoding (README, "Exactness"), so with the default
build a file may legitimately differ; that is reported, not treated as a failure.
"""

from __future__ import annotations

import argparse
import ast
import bisect
import contextlib
import io
import json
import os
import py_compile
import shutil
import subprocess
import sys
import tempfile
import time
import tokenize
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator, Optional

from prometheus_client.parser import text_string_to_metric_families

from plookup.app.bench.local_server import free_port
from plookup.files import cache_dir

AIDER_VERSION = "0.86.2"
DEFAULT_VENV = cache_dir() / "aider-venv"
AIDER_UNAVAILABLE = 75  # exit status when aider cannot be installed (EX_TEMPFAIL): tests skip on it
SERVER_STARTUP_SECONDS = 600  # the first use of a model fetches it and measures its cost curve
MODEL_ALIAS = "coder"
SOURCE = Path(bisect.__file__)  # 110 lines of plain functions, in every Python


@dataclass(frozen=True)
class Edit:
    """A rename inside one function, asked of aider: checkable from that function's Python names.

    One function at a time because that is what Qwen2.5-Coder 1.5B manages in both formats: asked
    to rename something across the whole file, it renamed it in docstrings and other functions too,
    or wrote SEARCH blocks that already held the new name. 0.5B copied aider's format example."""

    function: str
    what: str  # "parameter", "local variable"
    old: str
    new: str

    def message(self, edit_format: str) -> str:
        text = (f"In {SOURCE.name}, in the function `{self.function}`, rename the {self.what} `{self.old}` "
                f"to `{self.new}`. Change nothing else.")
        # Coder models like to answer with a unified diff, which aider's whole format then misreads.
        return text + (" Reply with the complete updated file, not a diff." if edit_format == "whole" else "")


EDIT = Edit("insort_left", "parameter", "x", "item")
# The --memory session: three small edits of one function, one after the other. With the 1.5B model,
# edits of insort_right and bisect_right after the first turn made it drop half the file; these
# keep the file whole, as an editor session should.
TURNS = (EDIT, Edit("insort_left", "parameter", "lo", "low"), Edit("insort_left", "parameter", "hi", "high"))

N_CTX = 8192
MODEL_METADATA = {  # what aider would otherwise look up on the web: the context window, no price
    "max_input_tokens": N_CTX, "max_output_tokens": N_CTX, "input_cost_per_token": 0.0,
    "output_cost_per_token": 0.0, "litellm_provider": "openai", "mode": "chat",
}

COUNTERS = {  # column -> the /metrics sample it is read from
    "tokens": "plookup_generated_tokens_total",
    "passes": "plookup_forward_passes_total",
    "drafted": "plookup_spec_decode_num_draft_tokens_total",
    "accepted": "plookup_spec_decode_num_accepted_tokens_total",
}


@dataclass
class Run:
    """One aider run's figures."""

    label: str  # what was compared: "drafting off", "drafting on", "memory off", "memory on"
    edit_format: str
    turn: int
    wall_s: float = 0.0
    requests: int = 0
    tokens: int = 0
    passes: int = 0
    drafted: int = 0
    accepted: int = 0
    aider_ok: bool = False
    compiles: bool = False
    edit_done: bool = False
    as_expected: bool = False  # byte-equal to the rename done by tokenize (docstrings untouched)
    identical: Optional[bool] = None  # to the baseline run of the same format and turn
    text: str = field(default="", repr=False)

    @property
    def passes_per_token(self) -> float:
        return self.passes / self.tokens if self.tokens else float("nan")


STARTED = time.monotonic()


def log(message: str) -> None:
    print(f"[aider_edit {time.monotonic() - STARTED:6.0f}s] {message}", file=sys.stderr, flush=True)


# --- aider's own venv --------------------------------------------------------------------------


class AiderUnavailable(RuntimeError):
    """aider-chat could not be installed (no network, or an unsupported Python)."""


def ensure_aider(venv: Path, python: str) -> Path:
    """The venv's ``aider`` executable, installing aider-chat into the venv the first time.

    A marker file names the installed version, so a later run (or another pin) knows at once."""
    aider, marker = venv / "bin" / "aider", venv / f".aider-chat-{AIDER_VERSION}"
    if aider.exists() and marker.exists():
        return aider
    log(f"installing aider-chat=={AIDER_VERSION} into {venv} (a few minutes, once)")
    steps = [[python, "-m", "venv", str(venv)]] if not (venv / "bin" / "python").exists() else []
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check"]
    steps += [pip + ["-q", "--upgrade", "pip"], pip + [f"aider-chat=={AIDER_VERSION}"]]
    for step in steps:
        log("$ " + " ".join(step))
        done = subprocess.run(step, stdout=sys.stderr, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            raise AiderUnavailable(f"`{' '.join(step)}` failed:\n{done.stderr[-2000:]}")
    marker.write_text(AIDER_VERSION + "\n")
    log("aider installed")
    return aider


# --- the server ----------------------------------------------------------------------------------


@contextlib.contextmanager
def serving(model: str, logs: Path, *options: str) -> Iterator[str]:
    """`plookup serve` on a free loopback port, answered once ``/health`` says 200: yields its URL.
    Stopped with SIGTERM (a clean exit, which also saves ``--memory``)."""
    port = free_port()
    command = [
        sys.executable, "-m", "plookup.app.cli", "serve", "-m", model, "--host", "127.0.0.1",
        "--port", str(port), "--model-alias", MODEL_ALIAS, "--n-ctx", str(N_CTX),
        "--threads", str(os.cpu_count() or 1), "--calibration", "blocking", *options,
    ]
    log("$ " + " ".join(command[1:]))
    with open(logs, "a") as err:
        server = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=err, stderr=err)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVER_STARTUP_SECONDS
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=5) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"plookup serve did not start; its log, {logs}:\n{tail(logs)}")
            time.sleep(0.5)
        log(f"server ready at {url}")
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def read_metrics(url: str) -> dict[str, float]:
    """The server's counters that the report needs, plus the chat requests answered."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as answer:
        text = answer.read().decode()
    values = dict.fromkeys([*COUNTERS.values(), "requests"], 0.0)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in values and not sample.labels:
                values[sample.name] = sample.value
            elif sample.name == "plookup_requests_total" and sample.labels.get("path") == "/v1/chat/completions":
                values["requests"] += sample.value
    return values


def tail(path: Path, chars: int = 3000) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else ""


# --- aider -----------------------------------------------------------------------------------------


def aider_environment(url: str, home: Path) -> dict:
    """aider's environment: the local server as OpenAI, nothing read from the user's HOME, and no
    way off this machine (a proxy on a closed loopback port answers every other connection)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "AIDER_", "ANTHROPIC_"))}
    dead_proxy = f"http://127.0.0.1:{free_port()}"
    env.update(
        HOME=str(home),
        OPENAI_API_BASE=f"{url}/v1",
        OPENAI_API_KEY="x",
        LITELLM_LOCAL_MODEL_COST_MAP="True",  # litellm's price table from the package, not the web
        AIDER_CHECK_UPDATE="false",
        AIDER_ANALYTICS="false",
        HF_HUB_OFFLINE="1",
        HTTP_PROXY=dead_proxy, HTTPS_PROXY=dead_proxy, http_proxy=dead_proxy, https_proxy=dead_proxy,
        NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost",
        TERM="dumb",
    )
    return env


def run_aider(aider: Path, url: str, file: Path, edit_format: str, message: str, timeout: float) -> tuple[bool, float]:
    """One non-interactive aider run on ``file`` (in its own folder): (exited 0, wall seconds).
    Its output goes to ``aider.log`` beside the file."""
    home = file.parent / "home"
    home.mkdir(exist_ok=True)
    metadata = home / "model-metadata.json"  # known here, aider fetches no price table for the model
    metadata.write_text(json.dumps({f"openai/{MODEL_ALIAS}": MODEL_METADATA}))
    command = [
        str(aider), "--model", f"openai/{MODEL_ALIAS}", "--edit-format", edit_format,
        "--no-git", "--no-auto-commits", "--no-dirty-commits", "--no-gitignore",
        "--yes-always", "--no-check-update", "--no-analytics", "--no-show-model-warnings",
        "--no-show-release-notes", "--no-detect-urls", "--no-auto-lint", "--no-auto-test",
        "--no-suggest-shell-commands", "--no-stream", "--no-pretty", "--no-fancy-input",
        "--map-tokens", "0", "--max-chat-history-tokens", str(N_CTX),  # no summarising requests
        "--timeout", str(int(timeout)), "--model-metadata-file", str(metadata),
        "--input-history-file", str(home / "input.history"),
        "--chat-history-file", str(home / "chat.history.md"),
        "--message", message, file.name,
    ]
    start = time.perf_counter()
    with open(file.parent / "aider.log", "a") as out:
        try:
            done = subprocess.run(command, cwd=file.parent, env=aider_environment(url, home), stdin=subprocess.DEVNULL,
                                  stdout=out, stderr=subprocess.STDOUT, timeout=timeout)
            ok = done.returncode == 0
        except subprocess.TimeoutExpired:
            ok = False
    return ok, time.perf_counter() - start


def python_names(text: str) -> Optional[set[str]]:
    """The identifiers of Python source (not its comments or strings); None if it does not tokenize."""
    try:
        return {t.string for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type == tokenize.NAME}
    except (tokenize.TokenError, SyntaxError):
        return None


def function_lines(text: str, function: str) -> Optional[tuple[int, int]]:
    """First and last line (1-based) of the top-level function ``function``; None when the text
    does not parse or has no such function."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == function:
            return node.lineno, node.end_lineno
    return None


def edit_done(text: str, edit: Edit) -> bool:
    """The function now uses the new name and no longer the old one (docstrings and comments aside)."""
    span = function_lines(text, edit.function)
    if span is None:
        return False
    names = python_names("".join(text.splitlines(keepends=True)[span[0] - 1 : span[1]]))
    return names is not None and edit.new in names and edit.old not in names


def renamed(text: str, edit: Edit) -> Optional[str]:
    """``text`` with the identifier renamed in the function and nothing else changed: what a
    perfect edit gives (None when an earlier turn left no such function)."""
    span = function_lines(text, edit.function)
    if span is None:
        return None
    first, last = span
    lines = text.splitlines(keepends=True)
    spots = [t.start for t in tokenize.generate_tokens(io.StringIO(text).readline)
             if t.type == tokenize.NAME and t.string == edit.old and first <= t.start[0] <= last]
    for row, col in reversed(spots):
        line = lines[row - 1]
        lines[row - 1] = line[:col] + edit.new + line[col + len(edit.old) :]
    return "".join(lines)


def compiles(file: Path) -> bool:
    """py_compile's verdict, its bytecode written to a scratch folder (never beside the file)."""
    with tempfile.TemporaryDirectory() as scratch:
        try:
            py_compile.compile(str(file), cfile=os.path.join(scratch, "out.pyc"), doraise=True)
            return True
        except py_compile.PyCompileError:
            return False


def measured_edit(run: Run, aider: Path, url: str, file: Path, edit: Edit, timeout: float) -> Run:
    """Run aider once on ``file`` and fill ``run`` with the server's counters and the checks."""
    before_text = file.read_text()
    expected = renamed(before_text, edit)
    before = read_metrics(url)
    log(f"{run.label}, {run.edit_format}, turn {run.turn}: aider renames `{edit.old}` -> `{edit.new}` "
        f"in {edit.function}")
    run.aider_ok, run.wall_s = run_aider(aider, url, file, run.edit_format, edit.message(run.edit_format), timeout)
    after = read_metrics(url)
    for column, sample in COUNTERS.items():
        setattr(run, column, int(after[sample] - before[sample]))
    run.requests = int(after["requests"] - before["requests"])
    run.text = file.read_text()
    run.compiles = compiles(file)
    run.edit_done = edit_done(run.text, edit)
    run.as_expected = expected is not None and run.text == expected
    if not run.aider_ok:
        log(f"aider failed or timed out; its log, {file.parent / 'aider.log'}:\n{tail(file.parent / 'aider.log')}")
    log(f"  {run.wall_s:.1f} s, {run.tokens} tokens, {run.passes} passes, compiles {run.compiles}, "
        f"edit done {run.edit_done}")
    return run


def fresh_copy(work: Path, name: str) -> Path:
    """A folder of its own with a copy of the source file, for one aider run (or session)."""
    folder = work / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return Path(shutil.copyfile(SOURCE, folder / SOURCE.name))


# --- the comparisons ----------------------------------------------------------------------------


def compare_drafting(args, aider: Path, work: Path) -> list[Run]:
    """Each format once with drafting off, then once on: one server start for each setting."""
    runs: list[Run] = []
    # Drafting from each request's own text only: the server's memory (on by default) is the --memory session's.
    for label, options in (("drafting off", ["--max-draft", "0"]), ("drafting on", [])):
        with serving(args.model, work / "server.log", "--no-memory", *options) as url:
            for edit_format in args.formats:
                file = fresh_copy(work, f"{label.replace(' ', '-')}-{edit_format}")
                runs.append(measured_edit(Run(label, edit_format, 1), aider, url, file, EDIT, args.timeout))
    mark_identical(runs, "drafting off")
    return runs


def compare_memory(args, aider: Path, work: Path) -> list[Run]:
    """Three turns on one file, the server with a fresh cross-request memory vs without one."""
    runs: list[Run] = []
    for label in ("memory off", "memory on"):
        memory = work / "memory.bin"
        memory.unlink(missing_ok=True)
        on = ["--memory", str(memory), "--memory-tokens", str(args.memory_tokens)]
        options = on if label == "memory on" else ["--no-memory"]
        file = fresh_copy(work, f"{label.replace(' ', '-')}-{args.memory_format}")
        with serving(args.model, work / "server.log", *options) as url:
            for turn, edit in enumerate(TURNS, 1):
                runs.append(measured_edit(Run(label, args.memory_format, turn), aider, url, file, edit, args.timeout))
    mark_identical(runs, "memory off")
    return runs


def mark_identical(runs: list[Run], baseline: str) -> None:
    """``identical``: the run's file is byte-equal to the baseline's of the same format and turn."""
    base = {(r.edit_format, r.turn): r.text for r in runs if r.label == baseline}
    for run in runs:
        if run.label != baseline and (run.edit_format, run.turn) in base:
            run.identical = run.text == base[run.edit_format, run.turn]


# --- the report ---------------------------------------------------------------------------------


def table(runs: list[Run]) -> str:
    """The summary as a Markdown table."""
    header = ("run", "format", "turn", "wall s", "requests", "tokens", "passes/token", "drafted", "accepted",
              "aider ok", "compiles", "edit done", "as expected", "identical")
    yes = {True: "yes", False: "no", None: "-"}
    rows = [
        (r.label, r.edit_format, str(r.turn), f"{r.wall_s:.1f}", str(r.requests), str(r.tokens),
         f"{r.passes_per_token:.3f}", str(r.drafted), str(r.accepted), yes[r.aider_ok], yes[r.compiles],
         yes[r.edit_done], yes[r.as_expected], yes[r.identical])
        for r in runs
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def report(runs: list[Run], args) -> dict:
    return {
        "model": args.model,
        "aider": AIDER_VERSION,
        "source": SOURCE.name,
        "threads": os.cpu_count(),
        "runs": [dict(asdict(r), passes_per_token=r.passes_per_token) for r in runs],
    }


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-m", "--model", default="qwen-coder-1.5b",
                        help="a GGUF file or a `plookup models list` name (default qwen-coder-1.5b)")
    parser.add_argument("--formats", default="whole,diff", help="aider edit formats, comma-separated (default: both)")
    parser.add_argument("--memory", action="store_true", help="also the three-turn session, with vs without --memory")
    parser.add_argument("--memory-format", default="whole", help="the three-turn session's edit format (default whole)")
    parser.add_argument("--memory-tokens", type=int, default=1 << 20, help="the server's --memory-tokens (default 1M)")
    parser.add_argument("--no-drafting-comparison", dest="drafting", action="store_false",
                        help="skip the drafting off/on runs (with --memory: the session only)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds one aider run may take (default 1800)")
    parser.add_argument("--venv", type=Path, default=DEFAULT_VENV, help=f"aider's venv (default {DEFAULT_VENV})")
    parser.add_argument("--python", default=sys.executable, help="the Python that makes aider's venv (3.10-3.12)")
    parser.add_argument("--work", type=Path, help="keep the edited files and logs here (default: a temporary folder)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--install-only", action="store_true", help="make aider's venv and stop")
    args = parser.parse_args(argv)
    args.formats = [f.strip() for f in args.formats.split(",") if f.strip()]

    try:
        aider = ensure_aider(args.venv, args.python)
    except AiderUnavailable as e:
        log(f"aider is unavailable: {e}")
        return AIDER_UNAVAILABLE
    if args.install_only:
        return 0
    with contextlib.ExitStack() as stack:
        if args.work is None:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="aider-edit-")))
        else:
            work = args.work
            work.mkdir(parents=True, exist_ok=True)
        log(f"work folder {work}; model {args.model}; {os.cpu_count()} threads")
        runs = compare_drafting(args, aider, work) if args.drafting else []
        if args.memory:
            runs += compare_memory(args, aider, work)
    print(table(runs))
    print("\n'identical': drafting (or memory) off and on left byte-identical files. Greedy decoding gives the "
          "same tokens up to the first near-tie, where llama.cpp's batched and single-token kernels may round "
          "apart (README, \"Exactness\"), so 'no' is possible with the default build and is not an error.")
    if args.json:
        args.json.write_text(json.dumps(report(runs, args), indent=2) + "\n")
        log(f"figures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
