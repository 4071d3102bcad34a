"""`python -m benchmarks.editors --editor fim,instruct`: what ggml-org's editor plugins send, over
HTTP, to llama-server and `plookup serve`, each started by the bench in a process of its own, one at
a time.

The request bodies are llama.vim's (ggml-org/llama.vim, autoload/llama.vim at a1c8e6e, 2026-01-31),
with its default settings; the one change is greedy sampling (temperature 0 after its samplers),
so that every system's text can be compared with plain decoding's.

- **fim**: llama.vim's ``/infill`` request. A case is a Python file of a PyPI release wheel that
  :mod:`plookup.app.bench.releases` downloads (code nobody here wrote), a cursor on an empty line
  at a line boundary (the lines that follow, 2-6 of them, are what the completion should write: the middle), the
  256 lines before and 64 after it as llama.vim sends them, and chunks of 33 lines of other files
  of the same package as ``input_extra`` (llama.vim's ring buffer holds such chunks of recently
  opened files). Each case is sent with llama.vim's two ``t_max_predict_ms`` budgets, 250 ms (its
  first request at a position) and 1000 ms (its default), and without one: tokens delivered
  within each budget (``timings.predicted_n``), decode tokens/s without a budget, the prompt's
  time, and whether the greedy text equals the plain system's. Every system runs each budget's
  pass over all cases on a freshly started server, so that no request drafts from an earlier
  answer to the same case (the memory, llama-server's ngram-mod pool).
- **instruct**: llama.vim's instruct mode iterated (``llama#inst_continue``): the system message
  holds the ring chunks, the lines before and after the selection and the selection (a function
  of a release file), each user message an instruction, each answer appended to the conversation
  before the next instruction, on ``/v1/chat/completions``. Decode tokens/s of iterations
  2..k, where the earlier answer is there to copy, and of the first.

- **session**: a user typing functions into release files with llama.vim, its requests (first
  FIM requests, speculative ones, the ring's warm-ups) replayed in order on each system, started
  with llama.vim's recommended server flags: see :mod:`.llama_vim_session`.

Systems: llama-server without drafting and with ``--spec-type ngram-mod``; ``plookup serve``
drafting (its cross-request memory on, the default), ``plookup serve --no-memory`` (instruct),
and plookup plain: the same server, each request with ``speculative: {"n_max": 0}``; for a sweep,
``llama-server SPEC N``: llama-server with its n-gram drafter SPEC drafting up to N tokens. Both
servers run at their own flash-attention default unless ``-fa`` is given (then both at it).
"""

from __future__ import annotations

import ast
import json
import os
import random
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from typing import Callable, Optional, Sequence

from plookup.app.bench.local_server import free_port, stop, wait_healthy
from plookup.app.bench.releases import RELEASES, python_files, wheel
from plookup.app.tables import grid

from ..servers.llama_server import SWEEPABLE_SPEC_TYPES, draft_max_flags

LLAMA_VIM = "ggml-org/llama.vim autoload/llama.vim a1c8e6e (2026-01-31)"
# llama.vim's g:llama_config defaults
N_PREFIX, N_SUFFIX, N_PREDICT = 256, 64, 128
T_MAX_PROMPT_MS = 500
RING_CHUNK_SIZE = 64
CHUNK_LINES = RING_CHUNK_SIZE // 2 + 1  # pick_chunk: text[l0 : l0 + ring_chunk_size/2], both ends in
BUDGETS_MS = (250, 1000)  # its first request at a position, and its t_max_predict_ms
RESPONSE_FIELDS = [
    "content", "timings/prompt_n", "timings/prompt_ms", "timings/prompt_per_token_ms", "timings/prompt_per_second",
    "timings/predicted_n", "timings/predicted_ms", "timings/predicted_per_token_ms",
    "timings/predicted_per_second", "truncated", "tokens_cached",
]
# What the bench reads beyond llama.vim's fields (they change nothing of the generation)
BENCH_FIELDS = ["timings/draft_n", "timings/draft_n_accepted", "stop_type"]
# llama.vim's FIM samplers, then a temperature of 0: greedy
FIM_SAMPLERS = ["top_k", "top_p", "infill", "temperature"]
MIDDLE_LINES = (2, 6)
MIN_FILE_LINES = 40
INSTRUCT_SYSTEM = (
    "You are a text-editing assistant. Respond ONLY with the result of applying INSTRUCTION to SELECTION given the "
    "CONTEXT. Maintain the existing text indentation. Do not add extra code blocks. Respond only with the modified "
    "block. If the INSTRUCTION is a question, answer it directly. Do not output any extra separators. Consider the "
    "local context before (PREFIX) and after (SUFFIX) the SELECTION.\n"
)
INSTRUCTIONS = (
    "Add type hints to every parameter and to the return value.",
    "Add a short docstring to every function that has none.",
    "Rename the local variables to longer, more descriptive names.",
    "Add a comment above every block explaining what it does.",
)
SELECTION_LINES = (12, 40)
INSTRUCT_MAX_TOKENS = 1024

# name -> (server, extra request fields): the systems the bench can run
SYSTEMS = {
    "llama-server": ("llama-server", {}),
    "llama-server ngram-mod": ("llama-server --spec-type ngram-mod", {}),
    "plookup": ("plookup serve", {}),
    "plookup plain": ("plookup serve", {"speculative": {"n_max": 0}}),
    "plookup --no-memory": ("plookup serve --no-memory", {}),
}
# (every drafting llama-server's plain decoding is plain llama-server's: plain_of)
PLAIN_OF = {"plookup": "plookup plain", "plookup --no-memory": "plookup plain", "llama-server": "plookup plain"}
FIM_SYSTEMS = ("llama-server", "llama-server ngram-mod", "plookup plain", "plookup")
INSTRUCT_SYSTEMS = ("llama-server", "llama-server ngram-mod", "plookup plain", "plookup --no-memory", "plookup")
WORKLOADS = ("fim", "instruct", "session")
SWEEP_SYSTEM = "llama-server SPEC N"  # a point of a sweep of llama-server's n-gram drafters


def system(name: str) -> tuple[str, dict]:
    """(server, extra request fields) of a system: one of SYSTEMS, or `llama-server SPEC N`, llama-server
    drafting with its n-gram drafter SPEC (ngram-mod, ngram-simple, ...) up to N tokens, for a sweep."""
    if name in SYSTEMS:
        return SYSTEMS[name]
    words = name.split()
    if len(words) == 3 and words[0] == "llama-server" and words[1] in SWEEPABLE_SPEC_TYPES and words[2].isdigit() \
            and int(words[2]) > 0:
        return " ".join(["llama-server", "--spec-type", words[1], *draft_max_flags(words[1], int(words[2]))]), {}
    raise ValueError(f"no system {name!r}: choose from {', '.join(SYSTEMS)}, or {SWEEP_SYSTEM} (SPEC of "
                     f"{', '.join(SWEEPABLE_SPEC_TYPES)}, N its longest draft)")


def plain_of(name: str) -> Optional[str]:
    """The system whose text a system's greedy text is held against: its own decoding without drafts."""
    return PLAIN_OF.get(name, "llama-server" if name.startswith("llama-server ") else None)


def parse_systems(text: str) -> list[str]:
    """--editor-systems' comma-separated names, each checked by `system`."""
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise ValueError(f"--editor-systems: no system in {text!r}")
    for name in names:
        system(name)
    return names


def chosen(wanted: Optional[list[str]], workload_systems: Sequence[str]) -> list[str]:
    """The systems a workload runs: its own (`workload_systems`) unless --editor-systems named some; of
    those, the workload's own and the points of a sweep, in the order named."""
    if wanted is None:
        return list(workload_systems)
    return [name for name in wanted if name in workload_systems or name not in SYSTEMS]


def parse_budgets(text: str) -> tuple[int, ...]:
    """--fim-budgets: comma-separated t_max_predict_ms values, `none` for no budget (0 in the records)."""
    words = [t.strip() for t in text.split(",") if t.strip()]
    if not all(w == "none" or w.isdigit() for w in words):
        raise ValueError(f"--fim-budgets: milliseconds or none, got {text!r}")
    budgets = tuple(0 if w == "none" else int(w) for w in words)
    if not budgets or len(set(budgets)) < len(budgets):
        raise ValueError(f"--fim-budgets: distinct milliseconds or none, got {text!r}")
    return budgets


# -- the cases


@dataclass(frozen=True)
class FimCase:
    """A file cut at the cursor: `before` + `middle` + `after` is the file. The cursor is on an
    empty line where `middle` goes (its lines, without their last newline, which starts `after`)."""

    name: str
    path: str
    before: str
    middle: str
    after: str
    extra: tuple = ()  # (filename, text) chunks of other files


@dataclass(frozen=True)
class InstructSession:
    name: str
    path: str
    before: str  # the file before the selection, after it, and the selection (whole lines)
    selection: str
    after: str
    extra: tuple = ()
    instructions: tuple = ()


def release_files(releases=RELEASES) -> dict[str, dict[str, str]]:
    """package -> {path: text} of each release pair's newer wheel (downloaded once, see :mod:`plookup.app.bench.releases`)."""
    return {package: python_files(wheel(package, new)) for package, _old, new in releases}


def cut_fim(name: str, path: str, text: str, rng: random.Random) -> Optional[FimCase]:
    """The file cut before a non-blank line that starts a middle of 2-6 lines (two of them not
    blank) with a line after them; None where the draw found no such place."""
    lines = text.splitlines(keepends=True)
    low, high = MIDDLE_LINES
    starts = [i for i in range(1, len(lines) - low) if lines[i].strip() and lines[i].endswith("\n")]
    if len(lines) < MIN_FILE_LINES or not starts:
        return None
    start = rng.choice(starts)
    end = min(start + rng.randint(low, high), len(lines) - 1)  # a line after the middle stays
    middle = "".join(lines[start:end])
    if sum(1 for line in lines[start:end] if line.strip()) < 2:
        return None  # something to write: two lines that are not blank
    return FimCase(name, path, "".join(lines[:start]), middle[:-1], "\n" + "".join(lines[end:]))


def ring_chunk(path: str, text: str, rng: random.Random) -> Optional[tuple[str, str]]:
    """llama.vim's pick_chunk of a file: CHUNK_LINES lines from a random line (all of a short file),
    joined with newlines and one after; None for a file of fewer than 3 lines."""
    lines = text.splitlines()
    if len(lines) < 3:
        return None
    if len(lines) + 1 >= RING_CHUNK_SIZE:
        first = rng.randint(0, max(0, len(lines) - RING_CHUNK_SIZE // 2))
        lines = lines[first : first + CHUNK_LINES]
    return path, "\n".join(lines) + "\n"


def ring_chunks(files: dict[str, str], exclude: Optional[str], count: int, rng: random.Random) -> tuple:
    """`count` chunks of the package's files other than `exclude` (the file being edited), one a file."""
    others = [p for p in sorted(files) if p != exclude]
    picked = rng.sample(others, min(count, len(others)))
    return tuple(c for c in (ring_chunk(p, files[p], rng) for p in picked) if c is not None)


def fim_cases(count: int, seed: int, chunks: int, packages: Optional[dict] = None) -> list[FimCase]:
    """`count` cases drawn with `seed`, a package's cases one after another (an editing session in
    one project): each package has one ring of `chunks` chunks of its files, and each of its cases
    sends the ring's chunks of files other than its own, in the ring's order (llama.vim sends its
    whole ring with every request, and llama-server's prompt cache keeps it between them)."""
    packages = release_files() if packages is None else packages
    rng = random.Random(seed)
    names = sorted(packages)
    cases = []
    for index, package in enumerate(names):
        files = packages[package]
        ring = ring_chunks(files, None, chunks, rng)
        wanted = count // len(names) + (index < count % len(names))
        used = set()
        for _attempt in range(wanted * 50):
            if len(used) == wanted:
                break
            path = rng.choice(sorted(files))
            case = cut_fim(f"fim:{package}:{path}", path, files[path], rng)
            if case is None or (path, len(case.before)) in used:
                continue
            used.add((path, len(case.before)))
            cases.append(FimCase(f"{case.name}:{case.before.count(chr(10)) + 1}", path, case.before, case.middle,
                                 case.after, tuple(c for c in ring if c[0] != path)))
    return cases


def functions(text: str) -> list[tuple[int, int]]:
    """(first line, end line) of every function of a module (0-based, end exclusive), decorators out."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    return [(node.lineno - 1, node.end_lineno) for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno is not None]


def instruct_sessions(count: int, seed: int, chunks: int, turns: int,
                      packages: Optional[dict] = None) -> list[InstructSession]:
    """`count` sessions, each a function of SELECTION_LINES lines of a release file and `turns` instructions."""
    if not 1 <= turns <= len(INSTRUCTIONS):
        raise ValueError(f"--instruct-turns: 1 to {len(INSTRUCTIONS)}")
    packages = release_files() if packages is None else packages
    rng = random.Random(seed)
    names = sorted(packages)
    sessions = []
    for index in range(count):
        package = names[index % len(names)]
        files = packages[package]
        spans = [(path, a, b) for path in sorted(files) for a, b in functions(files[path])
                 if SELECTION_LINES[0] <= b - a <= SELECTION_LINES[1]]
        if not spans:
            continue
        path, first, end = rng.choice(spans)
        lines = files[path].splitlines(keepends=True)
        sessions.append(InstructSession(
            f"instruct:{package}:{path}:{first + 1}", path, "".join(lines[:first]), "".join(lines[first:end]),
            "".join(lines[end:]), ring_chunks(files, path, chunks, rng), INSTRUCTIONS[:turns]))
    return sessions


# -- llama.vim's requests


def infill_body(prefix: str, suffix: str, extra: list, prompt: str, indent: int, t_max_predict_ms: int) -> dict:
    """llama#fim's /infill body, greedy (``temperature`` after its samplers), with the timings the
    bench reads: `prefix` and `suffix` as s:fim_ctx_local cuts them, `extra` the ring's chunks
    (``[{text, filename}]``), `prompt` the cursor's line up to the cursor, `indent` a whitespace
    line's indent."""
    return {
        "id_slot": 0,
        "input_prefix": prefix,
        "input_suffix": suffix,
        "input_extra": extra,
        "prompt": prompt,
        "n_predict": N_PREDICT,
        "stop": [],
        "n_indent": indent,
        "top_k": 40,
        "top_p": 0.90,
        "samplers": FIM_SAMPLERS,
        "temperature": 0.0,
        "stream": False,
        "cache_prompt": True,
        "t_max_prompt_ms": T_MAX_PROMPT_MS,
        "t_max_predict_ms": t_max_predict_ms,
        "response_fields": RESPONSE_FIELDS + BENCH_FIELDS,
    }


def fim_body(case: FimCase, budget_ms: int) -> dict:
    """llama.vim's /infill body (s:fim_ctx_local, llama#fim) for the cursor on the empty line,
    greedy; `budget_ms` 0: no time budget."""
    prefix = case.before.splitlines()[-N_PREFIX:]
    suffix = case.after[1:].splitlines()[:N_SUFFIX]
    return infill_body(
        "\n".join(prefix) + "\n",
        "" + "\n" + "\n".join(suffix) + "\n",  # the cursor's line's rest (none), then the lines after
        [{"text": text, "filename": name} for name, text in case.extra],
        "",  # the cursor's line up to the cursor: a whitespace line counts as empty
        0,  # a whitespace line's indent, for llama.vim
        budget_ms,
    )


def instruct_messages(session: InstructSession) -> list[dict]:
    """llama#inst_build's first messages: the system message with the context, the user's first instruction."""
    def lines(text: str, keep: slice) -> str:
        return "\n".join(text.splitlines()[keep])

    system = INSTRUCT_SYSTEM + "\n"
    system += "--- CONTEXT     " + "-" * 40 + "\n" + "\n".join(text for _, text in session.extra) + "\n"
    system += "--- PREFIX      " + "-" * 40 + "\n" + lines(session.before, slice(-N_PREFIX, None)) + "\n"
    system += "--- SELECTION   " + "-" * 40 + "\n" + lines(session.selection, slice(None)) + "\n"
    system += "--- SUFFIX      " + "-" * 40 + "\n" + lines(session.after, slice(None, N_SUFFIX)) + "\n"
    return [{"role": "system", "content": system}]


def instruct_body(messages: list[dict]) -> dict:
    """llama#inst_send's body, greedy (llama.vim's temperature is 0.1 after min_p 0.1), not streamed."""
    return {"id_slot": 0, "messages": messages, "min_p": 0.1, "temperature": 0.0, "samplers": ["min_p", "temperature"],
            "stream": False, "cache_prompt": True, "max_tokens": INSTRUCT_MAX_TOKENS}


# -- servers


def flash_flag(flash_attn) -> list:
    """-fa for both servers from the bench's setting (model_kwargs' flash_attn): not given (None) or
    "default" leaves it out, so that each runs at its own default (auto for both: on, on a CPU)."""
    if flash_attn in (None, "default"):
        return []
    return ["-fa", "auto" if flash_attn == "auto" else "on" if flash_attn else "off"]


class Server:
    """A server the bench started: `plookup serve` (sys.executable -m plookup.app.cli serve) or llama-server."""

    STARTUP_SECONDS = 300

    def __init__(self, kind: str, model_kwargs: dict, llama_server: Optional[str], log_path: Optional[str] = None):
        port = free_port()
        self.url, self.kind = f"http://127.0.0.1:{port}", kind
        threads = str(model_kwargs["n_threads"])
        if kind.startswith("llama-server"):
            if llama_server is None:
                raise ValueError("no llama-server binary (give one with --llama-server PATH)")
            command = [llama_server, "-m", model_kwargs["model_path"], "--host", "127.0.0.1", "--port", str(port),
                       "-c", str(model_kwargs["n_ctx"]), "-t", threads, "-tb", threads, "-np", "1",
                       *flash_flag(model_kwargs.get("flash_attn")), *kind.split()[1:]]
        else:
            command = [sys.executable, "-m", "plookup.app.cli", "serve", "-m", model_kwargs["model_path"],
                       "--host", "127.0.0.1", "--port", str(port), "--n-ctx", str(model_kwargs["n_ctx"]),
                       "--threads", threads, "--calibration", "blocking", *flash_flag(model_kwargs.get("flash_attn")),
                       *kind.split()[2:]]
        self.command = command
        log = open(log_path or os.devnull, "ab")
        self.process = subprocess.Popen(command, stdout=log, stderr=log)
        log.close()
        try:
            wait_healthy(self.process, self.url, f"{kind} ({' '.join(command)})", self.STARTUP_SECONDS)
        except RuntimeError:
            self.close()
            raise

    def post(self, route: str, body: dict) -> tuple[dict, float]:
        """The answer and the seconds it took, end to end."""
        request = urllib.request.Request(self.url + route, json.dumps(body).encode(), {"Content-Type": "application/json"})
        start = time.perf_counter()
        with urllib.request.urlopen(request, timeout=600) as r:
            answer = json.load(r)
        return answer, time.perf_counter() - start

    def close(self) -> None:
        stop(self.process, 20)


# -- running


def fim_record(case: FimCase, budget_ms: int, answer: dict, seconds: float) -> dict:
    """One /infill answer as the record keeps it (llama-server's names, from response_fields)."""
    return {
        "case": case.name, "budget_ms": budget_ms, "content": answer.get("content", ""), "seconds": seconds,
        "prompt_n": answer.get("timings/prompt_n"), "prompt_ms": answer.get("timings/prompt_ms"),
        "predicted_n": answer.get("timings/predicted_n", 0), "predicted_ms": answer.get("timings/predicted_ms", 0.0),
        "draft_n": answer.get("timings/draft_n"), "draft_n_accepted": answer.get("timings/draft_n_accepted"),
        "stop_type": answer.get("stop_type"), "tokens_cached": answer.get("tokens_cached"),
    }


def run_fim(name: str, cases: Sequence[FimCase], start: Callable[[str], Server], note, budgets=(*BUDGETS_MS, 0)) -> list:
    """Every case at every budget (0: none): a fresh server for each budget's pass."""
    kind, extra = system(name)
    records = []
    for budget in budgets:
        server = start(kind)
        try:
            for i, case in enumerate(cases):
                answer, seconds = server.post("/infill", {**fim_body(case, budget), **extra})
                records.append(fim_record(case, budget, answer, seconds))
                r = records[-1]
                note(f"fim {name} budget {budget or 'none'} {i + 1}/{len(cases)}: {r['predicted_n']} tokens in "
                     f"{r['predicted_ms']:.0f} ms, prompt {r['prompt_n']} in {r['prompt_ms']:.0f} ms")
        finally:
            server.close()
    return records


def run_instruct(name: str, sessions: Sequence[InstructSession], start: Callable[[str], Server], note) -> list:
    """Every session's instructions in turn, each answer appended before the next: one server a
    system (its memory and pool carry across the sessions too, as in an editor)."""
    kind, extra = system(name)
    records = []
    server = start(kind)
    try:
        for session in sessions:
            messages = instruct_messages(session)
            for turn, instruction in enumerate(session.instructions):
                messages = messages + [{"role": "user", "content": "INSTRUCTION: " + instruction}]
                answer, seconds = server.post("/v1/chat/completions", {**instruct_body(messages), **extra})
                content = answer["choices"][0]["message"]["content"] or ""
                timings = answer.get("timings") or {}
                usage = answer.get("usage") or {}
                records.append({
                    "session": session.name, "turn": turn + 1, "instruction": instruction, "content": content,
                    "seconds": seconds, "prompt_tokens": usage.get("prompt_tokens"),
                    "completion_tokens": usage.get("completion_tokens"),
                    "prompt_n": timings.get("prompt_n"), "prompt_ms": timings.get("prompt_ms"),
                    "predicted_n": timings.get("predicted_n", usage.get("completion_tokens", 0)),
                    "predicted_ms": timings.get("predicted_ms"), "draft_n": timings.get("draft_n"),
                    "draft_n_accepted": timings.get("draft_n_accepted"),
                })
                messages = messages + [{"role": "assistant", "content": content}]
                r = records[-1]
                note(f"instruct {name} {session.name} turn {turn + 1}: {r['predicted_n']} tokens in "
                     f"{(r['predicted_ms'] or 0):.0f} ms")
    finally:
        server.close()
    return records


# -- figures and tables


def rate(records: Sequence[dict]) -> Optional[float]:
    """Decode tokens/s over `records`: their tokens over their decode time (llama-server's
    predicted_ms: first token to last)."""
    ms = sum(r["predicted_ms"] or 0 for r in records)
    return 1000 * sum(r["predicted_n"] for r in records) / ms if ms else None


def mean(values) -> Optional[float]:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def fim_summary(runs: dict[str, list]) -> dict[str, dict]:
    """system -> its figures: mean tokens delivered and decode time at each budget, tokens/s without
    one, mean prompt time (the first pass: the first request of each case on its server), and how
    many no-budget texts equal the plain system's."""
    summary = {}
    for name, records in runs.items():
        by_budget = {}
        for r in records:
            by_budget.setdefault(r["budget_ms"], []).append(r)
        row = {"cases": len(by_budget.get(0, []))}
        for budget in BUDGETS_MS:
            got = by_budget.get(budget, [])
            row[f"tokens_{budget}ms"] = mean(r["predicted_n"] for r in got)
            row[f"decode_ms_{budget}ms"] = mean(r["predicted_ms"] for r in got)
        unbounded = by_budget.get(0, [])
        row["tokens_unbounded"] = mean(r["predicted_n"] for r in unbounded)
        row["decode_tok_s"] = rate(unbounded)
        first_pass = by_budget.get(records[0]["budget_ms"], []) if records else []
        row["prompt_ms"] = mean(r["prompt_ms"] for r in first_pass)
        row["drafted"] = sum(r["draft_n"] or 0 for r in unbounded)
        row["accepted"] = sum(r["draft_n_accepted"] or 0 for r in unbounded)
        plain = plain_of(name)
        if plain in runs and plain != name:
            theirs = {r["case"]: r["content"] for r in runs[plain] if r["budget_ms"] == 0}
            row["same_text"] = sum(theirs.get(r["case"]) == r["content"] for r in unbounded)
            row["same_as"] = plain
        summary[name] = row
    return summary


def instruct_summary(runs: dict[str, list]) -> dict[str, dict]:
    summary = {}
    for name, records in runs.items():
        first = [r for r in records if r["turn"] == 1]
        later = [r for r in records if r["turn"] > 1]
        row = {"sessions": len(first), "first_tok_s": rate(first), "later_tok_s": rate(later),
               "later_tokens": mean(r["predicted_n"] for r in later),
               "prompt_ms": mean(r["prompt_ms"] for r in records),
               "drafted": sum(r["draft_n"] or 0 for r in later), "accepted": sum(r["draft_n_accepted"] or 0 for r in later)}
        plain = plain_of(name)
        if plain in runs and plain != name:
            theirs = {(r["session"], r["turn"]): r["content"] for r in runs[plain]}
            row["same_text"] = sum(theirs.get((r["session"], r["turn"])) == r["content"] for r in records)
            row["turns"] = len(records)
            row["same_as"] = plain
        summary[name] = row
    return summary


def _f(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def fim_table(summary: dict[str, dict]) -> str:
    header = ["system", "tokens in 250 ms", "tokens in 1000 ms", "decode tok/s (no budget)",
              "tokens (no budget)", "prompt ms", "accepted/drafted", "greedy text = plain's"]
    rows = []
    for system, s in summary.items():
        budgets = [f"{_f(s[f'tokens_{b}ms'], '.1f')} ({_f(s[f'decode_ms_{b}ms'], '.0f')} ms)" for b in BUDGETS_MS]
        same = f"{s['same_text']}/{s['cases']} ({s['same_as']})" if "same_text" in s else "(reference)"
        rows.append([system, *budgets, _f(s["decode_tok_s"], ".1f"), _f(s["tokens_unbounded"], ".1f"),
                     _f(s["prompt_ms"], ".0f"), f"{s['accepted']}/{s['drafted']}", same])
    return grid(header, rows)


def instruct_table(summary: dict[str, dict]) -> str:
    header = ["system", "decode tok/s, turns 2..k", "decode tok/s, turn 1", "tokens a later turn", "prompt ms",
              "accepted/drafted (2..k)", "greedy text = plain's"]
    rows = []
    for system, s in summary.items():
        same = f"{s['same_text']}/{s['turns']} ({s['same_as']})" if "same_text" in s else "(reference)"
        rows.append([system, _f(s["later_tok_s"], ".1f"), _f(s["first_tok_s"], ".1f"), _f(s["later_tokens"], ".0f"),
                     _f(s["prompt_ms"], ".0f"), f"{s['accepted']}/{s['drafted']}", same])
    return grid(header, rows)


@dataclass
class EditorRecord:
    """What ``--json`` keeps of an editor run: the settings, every case and every answer."""

    command: str
    machine: dict
    model: str
    threads: int
    n_ctx: int
    llama_vim: str = LLAMA_VIM
    fim_cases: list = field(default_factory=list)
    instruct_sessions: list = field(default_factory=list)
    fim: dict = field(default_factory=dict)  # system -> records
    instruct: dict = field(default_factory=dict)
    session: dict = field(default_factory=dict)  # the typing session: its plan, requests, each system's answers (.llama_vim_session)


def merge(records: Sequence[dict]) -> dict:
    """Several runs' records (e.g. a system each) as one: the first's settings, every system's answers."""
    merged = dict(records[0])
    for key in ("fim", "instruct"):
        merged[key] = {}
        for record in records:
            merged[key].update(record.get(key) or {})
    # a session's runs only where the settings were the same (the same plan, user and seed)
    sessions = [r["session"] for r in records if r.get("session")]
    if sessions:
        first = sessions[0]
        same = [s for s in sessions if s.get("settings") == first.get("settings")]
        merged["session"] = dict(first, runs=[run for s in same for run in s.get("runs", [])],
                                 commands={k: v for s in same for k, v in s.get("commands", {}).items()})
    return merged


def print_tables(record: dict) -> None:
    if record.get("fim"):
        print(f"\n== FIM, llama.vim's /infill ({len(record['fim_cases'])} cases; tokens delivered and their decode "
              "time, mean a case) ==")
        print(fim_table(fim_summary(record["fim"])))
    if record.get("instruct"):
        print(f"\n== iterated instruct, llama.vim's /v1/chat/completions ({len(record['instruct_sessions'])} sessions) ==")
        print(instruct_table(instruct_summary(record["instruct"])))


def parse_list(text: str, known: Sequence[str], option: str) -> list[str]:
    found = [t.strip() for t in text.split(",") if t.strip()]
    if not found or set(found) - set(known):
        raise ValueError(f"{option}: choose from {', '.join(known)}; got {text!r}")
    return found


def cmd_editor(args, kwargs: dict, note, server_binary: Optional[str], machine: dict,
               run_session: Optional[Callable[[Optional[list]], dict]] = None) -> dict:
    """Run the chosen workloads and systems; print the tables of fim and instruct; return the
    record. The typing session (:mod:`.llama_vim_session`, which builds on this module) is run by
    `run_session`, handed the systems wanted, and printed by the caller."""
    workloads = parse_list(args.editor, WORKLOADS, "--editor")
    wanted = parse_systems(args.editor_systems) if args.editor_systems else None
    record = EditorRecord(" ".join(["python -m benchmarks.editors", *sys.argv[1:]]), machine, kwargs["model_path"],
                          kwargs["n_threads"], kwargs["n_ctx"])
    log = args.editor_log

    def start(kind: str) -> Server:
        note(f"starting {kind}")
        return Server(kind, kwargs, server_binary, log)

    if "fim" in workloads:
        cases = fim_cases(args.fim_cases, args.seed, args.fim_chunks)
        record.fim_cases = [asdict(c) for c in cases]
        for name in chosen(wanted, FIM_SYSTEMS):
            record.fim[name] = run_fim(name, cases, start, note, parse_budgets(args.fim_budgets))
    if "instruct" in workloads:
        sessions = instruct_sessions(args.instruct_sessions, args.seed, args.fim_chunks, args.instruct_turns)
        record.instruct_sessions = [asdict(s) for s in sessions]
        for name in chosen(wanted, INSTRUCT_SYSTEMS):
            record.instruct[name] = run_instruct(name, sessions, start, note)
    if "session" in workloads:
        record.session = run_session(wanted)
    result = asdict(record)
    print_tables(result)
    return result

