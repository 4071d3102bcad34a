"""Four clients at once through each server's HTTP API, as a held-out check of `plookup bench
--concurrency` (issue 38 item 6): the same code edits to `plookup serve -np 4` and to llama-server
`-np 4` with its n-gram drafting, one run each in turn, each server freshly started.

    python examples/four_clients.py LLAMA_SERVER [MODEL] [RUNS] [OUT.json]

MODEL: a GGUF file or a `plookup models` name (default qwen-coder-0.5b:q8_0). Each run sends the
standard workloads' 8 code edits (`code-*`, seed 0) as chat requests, greedy, 128 tokens, from 4
threads (a client sends its next request when its answer is back), and reads the wall time of the
run and each answer's own `timings` (prompt_n, prompt_ms, predicted_ms, draft_n, draft_n_accepted):
where the wall goes per request, on both servers. Both keep `cache_prompt` at its default (a slot
reuses the prefix it holds: the chat template's first tokens), and the warm-up request shares
nothing with the workloads beyond that; both keep their default flash attention (-fa auto, which
llama.cpp turns on here). Runs alternate between the systems (ABAB...), so the machine's drift
falls on both.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from plookup.app.bench.local_server import free_port, wait_healthy
from plookup.app.bench.workloads import standard_workloads
from plookup.app.models import resolve_model

THREADS, CLIENTS, MAX_TOKENS = 2, 4, 128
SYSTEMS = {
    "llama-server ngram-simple": ["--spec-type", "ngram-simple"],
    "llama-server ngram-mod": ["--spec-type", "ngram-mod"],
    "plookup": [],
}


PLOOKUP_CLI = [sys.executable, "-m", "plookup.app.cli"]


def code_edits() -> list:
    """The standard workloads' 8 code edits (seed 0) that every run sends."""
    return [w for w in standard_workloads(seed=0) if w.name.startswith("code-")][:8]


def start(system: str, binary: str, model: str, adjust=lambda command: command,
          stderr=subprocess.DEVNULL) -> tuple[subprocess.Popen, str]:
    """`system`'s server, freshly started and healthy: (process, base URL). `adjust(command)` may
    change its command line (examples/four_clients_profile.py adds its recording)."""
    port = free_port()
    common = ["-m", model, "--host", "127.0.0.1", "--port", str(port), "-t", str(THREADS), "-tb", str(THREADS),
              "-np", str(CLIENTS)]
    if system.startswith("llama-server"):  # llama-server's -c is shared by its slots: 4096 each, as plookup's
        command = [binary, *common, "-c", str(4096 * CLIENTS), *SYSTEMS[system]]
    else:
        command = [*PLOOKUP_CLI, "serve", *common, "-c", "4096", "-q", "--calibration", "blocking"]
    process = subprocess.Popen(adjust(command), stdout=subprocess.DEVNULL, stderr=stderr)
    url = f"http://127.0.0.1:{port}"
    wait_healthy(process, url, system, 300)
    return process, url


def ask(url: str, messages: list) -> dict:
    # (cache_prompt left at both servers' default, true: each keeps a slot's prefix for the next request)
    body = {"messages": messages, "temperature": 0, "max_tokens": MAX_TOKENS}
    request = urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    began = time.perf_counter()
    with urllib.request.urlopen(request, timeout=900) as r:
        answer = json.load(r)
    timings = answer.get("timings", {})
    return {"seconds": time.perf_counter() - began, "tokens": answer["usage"]["completion_tokens"],
            "prompt_n": timings.get("prompt_n"), "prompt_ms": timings.get("prompt_ms"),
            "predicted_ms": timings.get("predicted_ms"), "draft_n": timings.get("draft_n"),
            "draft_n_accepted": timings.get("draft_n_accepted")}


def run(url: str, workloads: list) -> dict:
    began = time.perf_counter()
    with ThreadPoolExecutor(CLIENTS) as pool:
        answers = list(pool.map(lambda w: ask(url, w.messages), workloads))
    wall = time.perf_counter() - began
    return {"wall": wall, "tokens": sum(a["tokens"] for a in answers), "answers": answers}


def main() -> None:
    binary = sys.argv[1]
    model = resolve_model(sys.argv[2] if len(sys.argv) > 2 else "qwen-coder-0.5b:q8_0")
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    out = sys.argv[4] if len(sys.argv) > 4 else None
    workloads = code_edits()
    record = {"model": model, "threads": THREADS, "clients": CLIENTS, "max_tokens": MAX_TOKENS,
              "workloads": [w.name for w in workloads], "runs": []}
    for repeat in range(runs):
        for system in SYSTEMS:
            process, url = start(system, binary, model)
            try:
                ask(url, [{"role": "user", "content": "hi"}])  # warm, not timed: no workload's prompt
                result = run(url, workloads)
            finally:
                process.terminate()
                process.wait(timeout=30)
            a = result["answers"]
            line = (f"{system:26s} run {repeat + 1}: wall {result['wall']:6.1f} s, {result['tokens']} tokens, "
                    f"prompt tokens {sum(x['prompt_n'] or 0 for x in a)}, prompt ms {sum(x['prompt_ms'] or 0 for x in a):7.0f}, decode ms "
                    f"{sum(x['predicted_ms'] or 0 for x in a):7.0f}, accepted/drafted "
                    f"{sum(x['draft_n_accepted'] or 0 for x in a)}/{sum(x['draft_n'] or 0 for x in a)}")
            print(line, flush=True)
            record["runs"].append({"system": system, "repeat": repeat, **result})
    for system in SYSTEMS:
        walls = [r["wall"] for r in record["runs"] if r["system"] == system]
        print(f"{system:26s} walls {', '.join(f'{w:.1f}' for w in walls)} s, mean {sum(walls) / len(walls):.1f}")
    if out:
        with open(out, "w", encoding="utf-8") as f:
            json.dump(record, f, indent=1)


if __name__ == "__main__":
    main()
