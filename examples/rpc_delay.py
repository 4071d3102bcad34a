"""Plain decoding, plookup and llama-server with the model's layers on llama.cpp RPC servers behind
a link of 0, 1 and 5 ms each way: does drafting pay more as each forward pass crosses a slower link?

    python examples/rpc_delay.py MODEL [--delays 0,1,5] [--max-tokens 128] [--servers 1]
        [--systems plain,plookup,server-plain,server-ngram-mod] [--llama-server PATH]
        [--json OUT.json] [--plot OUT.png]
    python examples/rpc_delay.py --replot RUN.json... --plot OUT.png

`--servers N` starts N `plookup rpc-server`s on 127.0.0.1, each behind a proxy of its own: the
model's layers are split over them (llama.cpp's default split, by the devices' free memory). The
local CPU keeps the inputs; llama.cpp puts the output layer on the last server, so every pass brings
every row's logits back over a link (598 KiB a row with Qwen's 152k vocabulary).

The link is examples/delay_proxy.py, a userspace TCP proxy on loopback that delays every forwarded
chunk by the given time each way (this kernel has no sch_netem, so no `tc netem`): latency only,
no bandwidth limit, no loss. Everything shares this machine's cores.

Systems, each loaded alone (a server serves one client at a time), greedy, on two copy-heavy code
edits and two free-text questions of the bench's standard workloads:
- plain: llama_cpp.Llama;
- plookup: plookup.Llama, its cost curve measured over the link at load (in a cache of this run's own);
- plookup-backend: the same with backend_sampling (greedy rows' argmax in the graph);
- server-plain, server-ngram-mod: llama-server (`make llama-server`, built with -DGGML_RPC=ON) with
  `--rpc` and no drafting or `--spec-type ngram-mod` at its default settings, `/completion` with
  the same prompt tokens.
Reports decode speed by kind (tokens after the first over the time after the first; llama-server's
from its own timings), forward passes per token (plookup), and the proxies' chunks and bytes per pass.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import llama_cpp

import plookup
from plookup.api import rpc_check
from plookup.app.bench.local_server import free_port
from plookup.app.bench.plain import chat_prompt_tokens, first_divergence
from plookup.app.bench.workloads import standard_workloads
from plookup.app.models import resolve_model
from plookup.app.options import plain_llama

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the checkout's benchmarks/, which holds llama-server's runner
from benchmarks.servers.llama_server import ServerSystem  # noqa: E402

THREADS = 2
SYSTEMS = ("plain", "plookup", "plookup-backend", "server-plain", "server-ngram-mod")
KWARGS = dict(n_ctx=4096, n_threads=THREADS, n_threads_batch=THREADS, verbose=False, seed=0)
KINDS = ("copy", "free")


class Proxy:
    def __init__(self, target_port: int, delay_ms: float):
        self.port = free_port()
        self.process = subprocess.Popen(
            [sys.executable, str(ROOT / "examples" / "delay_proxy.py"), str(self.port), str(target_port), str(delay_ms)],
            stdout=subprocess.PIPE, text=True,
        )
        assert self.process.stdout.readline().startswith("delay proxy:")
        self.endpoint = f"127.0.0.1:{self.port}"

    def counts(self) -> dict:
        self.process.send_signal(signal.SIGUSR1)
        line = self.process.stdout.readline()
        assert line.startswith("counts "), line
        return json.loads(line[len("counts "):])

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


def counts(proxies: list[Proxy]) -> dict:
    """The proxies' chunks and bytes each way, summed."""
    total: dict = {}
    for proxy in proxies:
        for key, value in proxy.counts().items():
            total[key] = total.get(key, 0) + value
    return total


def decode_local(llm, prompt: list[int], max_tokens: int) -> tuple[list[int], float, int]:
    """Greedy decoding in this process: the tokens, the time after the first token, forward passes
    after the prompt's (plain llama_cpp: one a token)."""
    llm.reset()
    stream = llm.generate(prompt, temp=0.0)
    first = next(stream)
    start = time.perf_counter()
    rest = list(itertools.islice(stream, max_tokens - 1))
    decode_s = time.perf_counter() - start
    stats = getattr(llm, "last_stats", None)
    # plookup's count includes the prompt's prefill pass.
    passes = (stats.forward_passes - 1) if stats is not None else len(rest)
    return [first, *rest], decode_s, passes


def decode_server(server: ServerSystem, prompt: list[int], max_tokens: int) -> tuple[list[int], float, None]:
    """Greedy decoding by llama-server: its tokens and its own generation time, which runs from
    the first token to the last (timings.predicted_ms), as decode_local's does."""
    request = server.completion_request(prompt, max_tokens, temperature=0.0, top_k=1)
    with urllib.request.urlopen(request) as r:
        reply = json.load(r)
    return list(reply["tokens"]), reply["timings"]["predicted_ms"] / 1000, None


def run(system, decode, prompts: dict[str, list[list[int]]], max_tokens: int, proxies: list[Proxy]) -> dict:
    """Every prompt of every kind through `decode`: per kind, tokens, decode time, passes and the
    links' traffic."""
    out = {}
    for kind, kind_prompts in prompts.items():
        r = dict(tokens=0, decode_s=0.0, passes=0, up=0, down=0, up_bytes=0, down_bytes=0, outputs=[])
        for prompt in kind_prompts:
            before = counts(proxies)
            tokens, decode_s, passes = decode(system, prompt, max_tokens)
            after = counts(proxies)
            r["outputs"].append(tokens)
            r["tokens"] += len(tokens) - 1
            r["decode_s"] += decode_s
            r["passes"] = None if passes is None or r["passes"] is None else r["passes"] + passes
            for key in ("up", "down", "up_bytes", "down_bytes"):
                r[key] += after[key] - before[key]
        r["tok_s"] = r["tokens"] / r["decode_s"]
        if r["passes"] is not None:
            r["passes_per_token"] = r["passes"] / r["tokens"]
            r["kib_down_per_pass"] = r["down_bytes"] / 1024 / max(1, r["passes"])
        out[kind] = r
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", nargs="?", default="qwen-coder-0.5b:q8_0")
    parser.add_argument("--delays", default="0,1,5", help="ms each way, comma-separated")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--servers", type=int, default=1, help="RPC servers the layers are split over")
    parser.add_argument("--systems", default="plain,plookup,server-plain,server-ngram-mod")
    parser.add_argument("--llama-server", help="llama-server built with -DGGML_RPC=ON (make llama-server)")
    parser.add_argument("--json")
    parser.add_argument("--plot")
    parser.add_argument("--replot", nargs="+", metavar="RUN.json", help="no model: --plot these runs' JSON")
    args = parser.parse_args()
    if args.replot:
        runs = [json.load(open(path)) for path in args.replot]
        plot(runs, [s for s in SYSTEMS if all(s in r["runs"][0] for r in runs)], args.plot or "rpc-delay.png")
        return 0
    systems = args.systems.split(",")
    unknown = sorted(set(systems) - set(SYSTEMS))
    if unknown:
        parser.error(f"unknown systems {unknown}; known: {', '.join(SYSTEMS)}")
    if any(s.startswith("server-") for s in systems) and not args.llama_server:
        parser.error("the server-* systems need --llama-server PATH")
    model = resolve_model(args.model)
    # Cost curves of this run's own (each link is a proxy port of its own): not in the user's cache.
    os.environ["PLOOKUP_CACHE_DIR"] = tempfile.mkdtemp(prefix="plookup-rpc-delay-")
    delays = [float(d) for d in args.delays.split(",")]
    ports = [free_port() for _ in range(args.servers)]
    servers = [
        subprocess.Popen(
            [sys.executable, "-m", "plookup.app.cli", "rpc-server", "--port", str(port), "--threads", str(THREADS)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        for port in ports
    ]
    results = dict(model=model, max_tokens=args.max_tokens, threads=THREADS, servers=args.servers,
                   system_info=llama_cpp.llama_print_system_info().decode(),
                   llama_cpp_python=llama_cpp.__version__, llama_server=args.llama_server, runs=[])
    try:
        for port, server in zip(ports, servers):
            rpc_check.wait_for_server(f"127.0.0.1:{port}", 60, alive=lambda server=server: server.poll() is None)
        tokenizer = llama_cpp.Llama(model, vocab_only=True, verbose=False)
        eos = tokenizer.token_eos()
        loads = standard_workloads(seed=0)
        prompts = {kind: [chat_prompt_tokens(tokenizer, w.messages) for w in loads if w.kind == kind][:2]
                   for kind in KINDS}
        results["workloads"] = {kind: [w.name for w in loads if w.kind == kind][:2] for kind in KINDS}
        for delay in delays:
            proxies = [Proxy(port, delay) for port in ports]
            endpoints = [p.endpoint for p in proxies]
            try:
                row = dict(delay_ms=delay)
                for system in systems:
                    start = time.perf_counter()
                    if system == "plain":
                        llm = plain_llama(dict(KWARGS, model_path=model, rpc_servers=endpoints))
                    elif system.startswith("plookup"):
                        llm = plookup.Llama(model, rpc_servers=endpoints, backend_sampling=system == "plookup-backend",
                                            **KWARGS)
                    else:
                        llm = ServerSystem(args.llama_server, system.removeprefix("server-").replace("plain", "") or None,
                                           dict(KWARGS, model_path=model), eos,
                                           extra_flags=["--rpc", ",".join(endpoints), "-ngl", "99"])
                    load_s = time.perf_counter() - start
                    decode = decode_server if system.startswith("server-") else decode_local
                    try:
                        row[system] = run(llm, decode, prompts, args.max_tokens, proxies)
                        if system == "plookup":
                            row["cost_curve"] = llm.drafter.policy.cost[:65].tolist()
                    finally:
                        llm.close()
                    row[system]["load_s"] = load_s  # plookup's includes its curve, measured over the link
                report(row, systems)
                results["runs"].append(row)
            finally:
                for proxy in proxies:
                    proxy.close()
    finally:
        for server in servers:
            server.kill()
            server.wait()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if args.plot:
        plot([results], systems, args.plot)
    return 0


def report(row: dict, systems: list[str]) -> None:
    """Speeds against plain (the first system), divergence from its outputs; outputs then dropped."""
    base = row[systems[0]]
    print(f"{row['delay_ms']:g} ms:", flush=True)
    for system in systems:
        for kind in KINDS:
            r = row[system][kind]
            r["divergence"] = [first_divergence(a, b) for a, b in zip(base[kind]["outputs"], r["outputs"])]
            r["x_first"] = r["tok_s"] / base[kind]["tok_s"]
            passes = f"{r['passes_per_token']:.2f} passes/token" if "passes_per_token" in r else "-"
            print(f"  {system:17s} {kind:5s} {r['tok_s']:6.1f} tok/s {r['x_first']:5.2f}x {systems[0]}, {passes}, "
                  f"{r['down_bytes'] / 1024 / max(1, r['tokens']):.0f} KiB down a token; divergence {r['divergence']}",
                  flush=True)
    for system in systems:
        for kind in KINDS:
            row[system][kind].pop("outputs")


def plot(runs: list[dict], systems: list[str], path: str) -> None:
    """Decode speed against link delay: a row of panels per run (one number of RPC servers), a
    panel per kind."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(runs), len(KINDS), figsize=(5 * len(KINDS), 3.6 * len(runs)), sharey=True,
                             squeeze=False)
    for results, row_axes in zip(runs, axes):
        delays = [row["delay_ms"] for row in results["runs"]]
        for ax, kind in zip(row_axes, KINDS):
            for system in systems:
                ax.plot(delays, [row[system][kind]["tok_s"] for row in results["runs"]], marker="o", label=system)
            ax.set_title(f"{kind}, layers on {results['servers']} RPC server(s)")
            ax.set_xlabel("link delay each way (ms)")
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
        row_axes[0].set_ylabel("decode tok/s")
    axes[0][0].legend(fontsize=8)
    first = runs[0]
    fig.suptitle(f"{Path(first['model']).name}, {first['threads']} threads, greedy, {first['max_tokens']} tokens")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    sys.exit(main())
