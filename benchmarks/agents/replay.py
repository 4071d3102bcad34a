"""An agent session replayed on each server (issue 45 item 6): the requests a real agent client sent
(recorded by record_proxy.py), sent again in order to `plookup serve` and to llama-server, each
freshly started with the same command line, runs alternating which system goes first.

    python benchmarks/agents/replay.py LLAMA_SERVER SESSION.jsonl [--model M] [--runs 3] [--json OUT]
        [--systems "plookup,plookup plain,llama-server,llama-server ngram-simple 32"]

A system is plookup serve (with or without drafting), llama-server at its defaults, or one of
llama-server's n-gram drafters: "llama-server TYPE [N]", its drafts at most N long (its default
length where N is not given), to sweep llama-server's configurations on a session.

SESSION.jsonl: one request a line, ``{"path": "/v1/responses", "body": {...}}``, in the order the
agent sent them (sessions/ holds the four clients' sessions recorded by record_proxy.py: see
README.md). Each request is replayed as recorded (its route, tools, messages and max tokens)
but greedy and not streamed, so that both servers answer the same question the same way where
their logits agree; the answer each server gives is its own, and the next request carries the
agent's recorded history, not that answer, so every system sees the same prompts.

Per turn: the wall time, and from each server's /metrics (llama-server's names, which plookup
serves too) the prompt tokens evaluated (a turn whose prompt extends the last one's reuses the
cached prefix), the tokens generated, the decode calls, the draft tokens and accepted ones, and
each server's own clock of its prompt evaluation and of its generation (``prompt_s``, ``decode_s``);
of plookup's accepted draft tokens, those from its cross-request memory (``from_memory``; the rest
came from the request itself: the conversation so far and the answer). And of the answer: the
tools it calls, and how many characters of their arguments copy the request's text (``copied``:
an edit tool's old text read a turn before), the most an index over the conversation could draft.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterator

from plookup.app.bench.local_server import free_port, wait_healthy

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/ from a checkout, run as a script
from benchmarks.servers.llama_server import SWEEPABLE_SPEC_TYPES, draft_max_flags  # noqa: E402  one home for the length flags
from plookup.app.models import resolve_model

THREADS = 2
SYSTEMS = {  # name: (server, its flags beyond the common ones)
    "plookup": ("plookup", []),  # plookup serve at its defaults (its drafting on)
    "plookup plain": ("plookup", ["--spec-type", "none"]),  # the same engine without drafts
    "llama-server": ("llama-server", []),  # llama-server at its defaults (no drafting)
}
# and "llama-server TYPE [N]": one of llama-server's n-gram drafters, its drafts at most N long
# (its default length where N is not given), e.g. "llama-server ngram-simple 32"
NGRAM_TYPES = SWEEPABLE_SPEC_TYPES  # those whose draft length draft_max_flags sets
DEFAULT_SYSTEMS = ("plookup", "llama-server", "llama-server ngram-mod")
REFERENCE = "llama-server"  # whose answers the others' texts are compared with
COUNTERS = {
    "prompt_tokens": "llamacpp:prompt_tokens_total",
    "generated": "llamacpp:tokens_predicted_total",
    "decodes": "llamacpp:n_decode_total",
    "drafted": "llamacpp:spec_decode_num_draft_tokens_total",
    "accepted": "llamacpp:spec_decode_num_accepted_tokens_total",
    "from_memory": "plookup_spec_decode_num_accepted_tokens_from_memory_total",  # plookup's alone: 0 on llama-server
    "prompt_s": "llamacpp:prompt_seconds_total",  # the server's own clock: prompt evaluation
    "decode_s": "llamacpp:tokens_predicted_seconds_total",  # and generation after it
}


def load_session(path: str) -> list[dict]:
    """A recorded session: its requests, one JSON object a line."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@contextlib.contextmanager
def serving(system: str, binary: str, model: str, n_ctx: int) -> Iterator[tuple[subprocess.Popen, str]]:
    """`system` started afresh, stopped after: yields (its process, its URL)."""
    process, url = start(system, binary, model, n_ctx)
    try:
        yield process, url
    finally:
        process.terminate()
        process.wait(timeout=60)


def start(system: str, binary: str, model: str, n_ctx: int) -> tuple[subprocess.Popen, str]:
    port = free_port()
    common = ["-m", model, "--host", "127.0.0.1", "--port", str(port), "-t", str(THREADS), "-tb", str(THREADS),
              "-c", str(n_ctx), "-np", "1"]
    server, flags = system_flags(system)
    if server == "plookup":
        command = [sys.executable, "-m", "plookup.app.cli", "serve", *common, "-q", "--calibration", "blocking", *flags]
    else:
        command = [binary, *common, "--metrics", "--jinja", *flags]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    wait_healthy(process, url, system, 600)
    return process, url


def system_flags(system: str) -> tuple[str, list[str]]:
    """(server, its flags) of a system's name (SYSTEMS, or "llama-server TYPE [N]")."""
    if system in SYSTEMS:
        return SYSTEMS[system]
    parts = system.split()
    known = 2 <= len(parts) <= 3 and parts[0] == "llama-server" and parts[1] in NGRAM_TYPES
    if not known or not all(n.isdigit() and int(n) > 0 for n in parts[2:]):
        raise SystemExit(f"unknown system {system!r}: {', '.join(SYSTEMS)}, or 'llama-server TYPE [N]' with TYPE one of "
                         f"{', '.join(NGRAM_TYPES)}")
    spec_type, length = parts[1], parts[2:]
    return "llama-server", ["--spec-type", spec_type, *(draft_max_flags(spec_type, int(length[0])) if length else [])]


def counters(url: str) -> dict:
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            values[name.split("{")[0]] = float(value)
    return {key: values.get(name, 0.0) for key, name in COUNTERS.items()}


LENGTH_FIELDS = ("max_tokens", "max_output_tokens", "max_completion_tokens")


def send(url: str, path: str, body: dict, cap: int) -> tuple[int, str]:
    """One recorded request, greedy, not streamed, its answer's length capped at `cap` tokens
    (agents ask for tens of thousands, and a small model may loop to the end): the status and the
    answer (its texts and calls, as JSON)."""
    body = dict(body, stream=False, temperature=0.0)
    for field in LENGTH_FIELDS:
        if field in body:
            body[field] = min(body[field] or cap, cap)
    if not any(field in body for field in LENGTH_FIELDS):
        body["max_output_tokens" if path.endswith("/responses") else "max_tokens"] = cap
    request = urllib.request.Request(url + path, json.dumps(body).encode(), {"Content-Type": "application/json",
                                                                             "x-api-key": "unused"})
    try:
        with urllib.request.urlopen(request, timeout=3600) as r:
            return r.status, answer_of(path, json.loads(r.read()))
    except urllib.error.HTTPError as e:
        print(f"  {path}: {e.code} {e.read()[:300]!r}", flush=True)
        return e.code, ""


def answer_of(path: str, reply: dict) -> str:
    """What the answer says, whichever route gave it: texts and calls (their ids left out, which
    each server draws), as one JSON text."""
    if path.endswith("/responses"):
        parts = [[o.get("type"), o.get("name"), o.get("arguments"), [c.get("text") for c in o.get("content") or []]]
                 for o in reply.get("output", [])]
    elif path.endswith("/messages"):
        parts = [[b.get("type"), b.get("text"), b.get("name"), b.get("input")] for b in reply.get("content", [])]
    else:
        message = reply["choices"][0]["message"]
        parts = [message.get("content"), [[c["function"]["name"], c["function"]["arguments"]]
                                          for c in message.get("tool_calls") or []]]
    return json.dumps(parts, ensure_ascii=False)


def replay(url: str, session: list[dict], cap: int) -> list[dict]:
    turns = []
    for request in session:
        before, began = counters(url), time.perf_counter()
        status, answer = send(url, request["path"], request["body"], cap)
        seconds = time.perf_counter() - began
        after = counters(url)
        calls = calls_in(answer)
        turns.append({"status": status, "seconds": seconds, "answer": answer, "calls": [name for name, _ in calls],
                      "copied": copied(calls, request["body"]), **{k: after[k] - before[k] for k in COUNTERS}})
    return turns


MIN_COPY = 12  # characters: a shorter common piece is a word or a bit of syntax, not text copied


def strings_in(value) -> list[str]:
    """Every string inside a JSON value (a JSON text inside a string too: a call's arguments)."""
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings_in(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings_in(v)]
    if isinstance(value, str):
        try:
            inner = json.loads(value)
        except ValueError:
            return [value]
        return strings_in(inner) if isinstance(inner, (dict, list)) else [value]
    return []


def calls_in(answer: str) -> list[tuple]:
    """(name, arguments) of each call in an answer (answer_of's JSON, whichever route gave it)."""
    parts = json.loads(answer) if answer else []
    if len(parts) == 2 and not isinstance(parts[0], list):  # chat completions: [content, [[name, arguments], ...]]
        return [tuple(call) for call in parts[1]]
    return [(p[1], p[2]) if p[0] == "function_call" else (p[2], p[3])  # responses' items, messages' blocks
            for p in parts if p[0] in ("function_call", "tool_use")]


def copied(calls: list[tuple], body: dict) -> list[int]:
    """[characters of the `calls`' arguments (:func:`calls_in`) that copy text of the request (pieces of at
    least MIN_COPY characters found in it: the file a turn read, an earlier turn's text), all
    their characters]: what an index over the conversation could draft of an edit tool's
    arguments, at most."""
    texts = [s for _, arguments in calls for s in strings_in(arguments)]
    source = "\n".join(strings_in(body))
    covered = 0
    for text in texts:
        i = 0
        while i < len(text):
            length = longest_copy(text, i, source)
            covered, i = covered + length, i + max(length, 1)
    return [covered, sum(len(t) for t in texts)]


def longest_copy(text: str, i: int, source: str) -> int:
    """The longest piece of `text` from `i` found in `source`, if at least MIN_COPY long, else 0."""
    if text[i : i + MIN_COPY] not in source or i + MIN_COPY > len(text):
        return 0
    low, high = MIN_COPY, len(text) - i  # found at low; find the longest by bisection
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if text[i : i + mid] in source else (low, mid - 1)
    return low


def summary(turns: list[dict]) -> str:
    seconds = sorted(t["seconds"] for t in turns)
    p90 = seconds[min(len(seconds) - 1, int(0.9 * len(seconds)))]
    total = {k: sum(t[k] for t in turns) for k in COUNTERS}
    failed = sum(t["status"] != 200 for t in turns)
    copies = [sum(t["copied"][i] for t in turns) for i in (0, 1)]
    return (f"turns {len(turns)} ({failed} failed), wall {sum(seconds):7.1f} s, per turn median {statistics.median(seconds):6.1f} s "
            f"p90 {p90:6.1f} s; prompt tokens {total['prompt_tokens']:.0f}, generated {total['generated']:.0f}, "
            f"decodes {total['decodes']:.0f}, accepted/drafted {total['accepted']:.0f}/{total['drafted']:.0f}; "
            f"calls' arguments copying the request {copies[0]}/{copies[1]} characters; "
            f"the server's clock: prompt {total['prompt_s']:.1f} s, generation {total['decode_s']:.1f} s")


def same_text(runs: list[dict], system: str) -> str:
    """How many of the system's answers (first run) are the reference's, turn by turn."""
    first = {r["system"]: r["turns"] for r in runs if r["repeat"] == 0}
    if system == REFERENCE or REFERENCE not in first:
        return ""
    same = [i for i, (a, b) in enumerate(zip(first[system], first[REFERENCE])) if a["answer"] == b["answer"]]
    return f"; {REFERENCE}'s text on {len(same)}/{len(first[system])} turns"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("llama_server")
    parser.add_argument("session")
    parser.add_argument("--model", default="qwen-coder-0.5b:q8_0")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--n-ctx", type=int, default=32768)
    parser.add_argument("--max-tokens", type=int, default=512, help="the most tokens a turn's answer may have")
    parser.add_argument("--systems", default=",".join(DEFAULT_SYSTEMS), help=f"of {', '.join(SYSTEMS)}, or 'llama-server TYPE [N]'")
    parser.add_argument("--json")
    args = parser.parse_args()
    session = load_session(args.session)
    model = resolve_model(args.model)
    systems = [name.strip() for name in args.systems.split(",")]
    for name in systems:
        system_flags(name)  # a misspelt system stops the run now, not after the others have run
    record = {"model": model, "threads": THREADS, "n_ctx": args.n_ctx, "max_tokens": args.max_tokens, "session": args.session,
              "requests": len(session), "runs": []}
    for repeat in range(args.runs):
        order = systems if repeat % 2 == 0 else systems[::-1]  # alternating: the machine's drift falls on both
        for system in order:
            with serving(system, args.llama_server, model, args.n_ctx) as (_, url):
                turns = replay(url, session, args.max_tokens)
            print(f"{system:30s} run {repeat + 1}: {summary(turns)}", flush=True)
            record["runs"].append({"system": system, "repeat": repeat, "turns": turns})
    for system in systems:
        walls = [sum(t["seconds"] for t in r["turns"]) for r in record["runs"] if r["system"] == system]
        print(f"{system:30s} walls {', '.join(f'{w:.1f}' for w in walls)} s, median {statistics.median(walls):.1f}"
              f"{same_text(record['runs'], system)}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(record, f, indent=1)


if __name__ == "__main__":
    main()
