"""Records what the real llama.vim sends in a scripted editing session, for
``test_llama_vim_conformance.py`` to hold the port (``benchmarks/editors/llama_vim_session.py``) to.

    git clone https://github.com/ggml-org/llama.vim /tmp/llama.vim && git -C /tmp/llama.vim checkout a1c8e6e
    python benchmarks/editors/tests/data/llama_vim/record.py --plugin /tmp/llama.vim

It starts a fake ``/infill`` server on loopback (no model: it logs each request's path, body and
arrival time, and answers with :func:`answer` after :data:`FIM_DELAY_MS`, one request at a time as
llama-server's one slot does) and a real Vim (``vim``, 9.0 or later, with +job +timers +textprop)
in a pseudo-terminal with only llama.vim loaded (its defaults but the endpoint, and
``enable_at_startup`` off so that ``driver.vim`` enables it at the scenario's time 0). ``driver.vim``
feeds :data:`SCENARIO`'s keys as typed, each on a timer at its time. The requests are written to
``recording.json.gz`` beside this file, with Vim's events (``events``: for reading, not compared).

The scenario: Vim opens ``ngram.py``, jumps, yanks 6 lines; opens ``index_drafter.py`` (this
directory's ``index_drafter.py.txt`` with one method cut out), goes to the line above the cut,
``o``, types the method's first line key by key (10 keys a second: a request in flight while the
user types), pauses until the ring's timer fires in insert mode, accepts the suggestion with Tab,
types on, Esc, ``:w``. Steps fall on odd 50 ms so that Vim's timers (every 100 ms from a key, every
1000 ms for the ring) and the answers (:data:`FIM_DELAY_MS` after a request) do not race them.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HERE = Path(__file__).resolve().parent
# the files Vim edits, frozen copies of two of plookup's modules (.txt: text here, not code)
TRUTH = "index_drafter.py.txt"
EDITED = "index_drafter.py"
CUT = (276, 278)  # the method the user writes back (1-based, inclusive) in TRUTH
OTHER = "ngram.py"
OTHER_TEXT = "ngram.py.txt"
FIM_DELAY_MS = 425  # an /infill answer's time on the fake server (off the 100 ms grid of Vim's timers)
WARM_UP_DELAY_MS = 25  # a warm-up's (n_predict 0)
RECORDING = HERE / "recording.json.gz"
LLAMA_VIM_COMMIT = "a1c8e6e"
RAND_SEED = 46  # Vim's test_srand_seed()


def keys_of(action: list) -> str:
    """The keys Vim is fed for a scenario action."""
    kind = action[0]
    return {
        "open": lambda: f":edit {action[1]}\r",
        "goto": lambda: f"{action[1]}G",
        "yank": lambda: f"{action[1]}yy",
        "o": lambda: "o",
        "type": lambda: action[1],
        "enter": lambda: "\r",
        "esc": lambda: "\x1b",
        "tab": lambda: "\t",
        "write": lambda: ":w\r",
        "quit": lambda: ":qa!\r",
    }[kind]()


def make_scenario() -> list:
    """[{"t": ms, "action": [...], "keys": "..."}]: the session above."""
    steps = []

    def at(t: int, *action) -> None:
        steps.append({"t": t, "action": list(action), "keys": keys_of(list(action))})

    at(350, "open", OTHER)  # BufEnter: a chunk 100 ms later; the ring's 1000 ms tick sends its warm-up
    at(1250, "goto", 40)
    at(1450, "yank", 6)  # TextYankPost: a chunk of the 6 lines
    at(2250, "open", EDITED)  # BufLeave (around line 40 of ngram.py), BufEnter (around line 1)
    at(2450, "goto", CUT[0] - 1)
    at(4250, "o")  # the first request; its answer is shown, then the speculative one
    t = 4850
    for ch in "    def observe_sampling(":
        at(t, "type", ch)  # 10 keys a second: the requests wait behind the one in flight
        t += 100
    t += 4400  # no move for 3 s: the ring's timer sends a warm-up in insert mode
    at(t, "tab")  # the suggestion shown (the answer at the last key's position)
    t += 1500
    at(t, "enter")
    t += 100
    for ch in "        self":
        at(t, "type", ch)
        t += 100
    t += 1500
    at(t, "esc")
    t += 500
    at(t, "write")  # BufWritePost: a chunk around the cursor
    t += 1100
    at(t, "quit")
    return steps


SCENARIO = make_scenario()


def truth_text() -> str:
    return (HERE / TRUTH).read_text()


def edited_text() -> str:
    lines = truth_text().split("\n")
    return "\n".join(lines[: CUT[0] - 1] + lines[CUT[1]:])


def answer(body: dict, truth: str) -> dict:
    """The fake server's answer to an /infill body: a warm-up's (n_predict 0) is empty; a FIM
    request's content is what follows its prefix + prompt in `truth` (the last 120 characters
    found there), to the second line end: the rest of the line and the next; else ``pass``."""
    if body.get("n_predict") == 0:
        return {}
    typed = (body["input_prefix"] + body["prompt"])[-120:]
    found = truth.find(typed)
    content = "pass\n"
    if typed and found >= 0:
        rest = truth[found + len(typed):]
        cut = rest.find("\n", rest.find("\n") + 1)
        content = rest[: cut + 1] if cut >= 0 else rest
    return {"content": content, "timings/prompt_n": 1, "timings/prompt_ms": 1.0,
            "timings/prompt_per_token_ms": 1.0, "timings/prompt_per_second": 1000.0,
            "timings/predicted_n": 1, "timings/predicted_ms": 1.0, "timings/predicted_per_token_ms": 1.0,
            "timings/predicted_per_second": 1000.0, "truncated": False, "tokens_cached": 0}


def delay_ms(body: dict) -> int:
    return WARM_UP_DELAY_MS if body.get("n_predict") == 0 else FIM_DELAY_MS


class Recorder:
    """The fake server: every request logged on arrival, answered one at a time."""

    def __init__(self, truth: str):
        self.truth, self.log, self.t0 = truth, [], time.monotonic()
        self.slot = threading.Lock()
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                body = json.loads(raw)
                recorder.log.append({"t_ms": round((time.monotonic() - recorder.t0) * 1000), "path": self.path,
                                     "body": body})
                with recorder.slot:
                    time.sleep(delay_ms(body) / 1000)
                    out = json.dumps(answer(body, recorder.truth), separators=(",", ":")).encode()  # llama-server's compact JSON
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def run_vim(work: Path, plugin: Path, port: int, timeout: float) -> None:
    vimrc = work / "minimal.vimrc"
    vimrc.write_text("\n".join([
        "set nocompatible", f"set runtimepath^={plugin}", "filetype off", "syntax off",
        "set noautoindent nosmartindent nocindent noswapfile nobackup nowritebackup shortmess+=I",
        f"let g:llama_config = {{'endpoint_fim': 'http://127.0.0.1:{port}/infill', 'enable_at_startup': v:false}}",
        "runtime plugin/llama.vim",  # (--noplugin: Vim's own plugins stay out)
        f"let g:rand_seed = {RAND_SEED}",
        f"let g:scenario_path = '{work / 'scenario.json'}'", f"let g:events_path = '{work / 'events.jsonl'}'",
        f"source {HERE / 'driver.vim'}", ""]))
    # a terminal for Vim (script(1) holds the pty; nothing is typed into it but the driver's keys)
    command = f"vim -N -u {vimrc} -i NONE --noplugin"
    subprocess.run(["script", "-qfc", command, "/dev/null"], cwd=work, stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=timeout, check=True,
                   env={**os.environ, "TERM": "xterm"})


def record(plugin: Path, out: Path, timeout: float = 120.0) -> dict:
    truth = truth_text()
    recorder = Recorder(truth)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        shutil.copy(HERE / OTHER_TEXT, work / OTHER)
        (work / EDITED).write_text(edited_text())
        (work / "scenario.json").write_text(json.dumps(SCENARIO))
        run_vim(work, plugin, recorder.port, timeout)
        time.sleep(0.5)
        events = [json.loads(line) for line in (work / "events.jsonl").read_text().splitlines()]
    recorder.server.shutdown()
    version = subprocess.run(["vim", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    commit = subprocess.run(["git", "-C", str(plugin), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or LLAMA_VIM_COMMIT
    data = {"llama_vim_commit": commit, "vim": version, "rand_seed": RAND_SEED, "fim_delay_ms": FIM_DELAY_MS,
            "warm_up_delay_ms": WARM_UP_DELAY_MS, "requests": recorder.log, "events": events}
    with gzip.open(out, "wt") as f:
        json.dump(data, f, indent=0, sort_keys=True)
    return data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plugin", required=True, type=Path, help="a checkout of ggml-org/llama.vim")
    parser.add_argument("--out", type=Path, default=RECORDING)
    args = parser.parse_args()
    data = record(args.plugin.resolve(), args.out)
    for r in data["requests"]:
        b = r["body"]
        print(f"{r['t_ms']:6d} ms  n_predict {b.get('n_predict')}  extra {len(b.get('input_extra', []))}  "
              f"prompt {b.get('prompt', '')!r}  t_max_predict_ms {b.get('t_max_predict_ms')}")
    print(f"{len(data['requests'])} requests -> {args.out}")


if __name__ == "__main__":
    main()
