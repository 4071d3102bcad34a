"""Where a server's CPU goes while it answers a recorded session: each turn's wall time, the
server's prompt clock, and every thread's CPU seconds (from /proc), one system per invocation.

    python benchmarks/agents/thread_cpu.py SYSTEM LLAMA_SERVER SESSION.jsonl MODEL [--py-spy PATH]

SYSTEM as replay.py names them. With --py-spy, py-spy (not a dependency: `pip install --target DIR
py-spy`) samples the server's Python threads, native frames included, for 60 s of the second turn
(raw stacks in thread_cpu-spy.txt): whether the decoding thread is inside llama_decode or in Python.
Run it under the machine's CPU lock, as every timed run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/ from a checkout, run as a script
from benchmarks.agents import replay  # noqa: E402


def thread_cpu(pid: int) -> dict:
    """{thread name:tid: CPU seconds (user + system)} of a process's threads."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended
            continue
        out[f"{name}:{tid}"] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("system")
    parser.add_argument("llama_server")
    parser.add_argument("session")
    parser.add_argument("model")
    parser.add_argument("--py-spy", metavar="PATH")
    parser.add_argument("--n-ctx", type=int, default=32768)
    args = parser.parse_args()
    session = replay.load_session(args.session)
    with replay.serving(args.system, args.llama_server, args.model, args.n_ctx) as (process, url):
        for i, request in enumerate(session):
            before, began, clock = thread_cpu(process.pid), time.perf_counter(), replay.counters(url)["prompt_s"]
            if i == 1 and args.py_spy:
                subprocess.Popen([args.py_spy, "record", "--native", "--idle", "-r", "10", "-d", "60", "-f", "raw",
                                  "-o", "thread_cpu-spy.txt", "--pid", str(process.pid)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            replay.send(url, request["path"], request["body"], 512)
            wall, after = time.perf_counter() - began, thread_cpu(process.pid)
            spent = {t: round(cpu - before.get(t, 0.0), 2) for t, cpu in after.items() if cpu - before.get(t, 0.0) > 0.005}
            print(json.dumps({"system": args.system, "turn": i, "wall": round(wall, 2),
                              "prompt_s": round(replay.counters(url)["prompt_s"] - clock, 2),
                              "cpu": round(sum(spent.values()), 2), "threads": spent}), flush=True)


if __name__ == "__main__":
    main()
