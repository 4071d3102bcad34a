"""Plain decoding vs plookup with the model's layers on a llama.cpp RPC server behind a link of 0, 1
and 5 ms each way: does drafting pay more as each forward pass crosses a slower link?

    python examples/rpc_delay.py MODEL [DELAYS_MS [MAX_TOKENS [OUT.json [N_GPU_LAYERS]]]]

N_GPU_LAYERS: how many layers go to the server (default: all). llama.cpp keeps the first ones on
the local CPU and puts the output layer on the server whenever any layer is there, so every pass
still brings every row's logits back over the link (measured: 598 KiB a row with Qwen's 152k
vocabulary, with 24 of 24 layers as with all).

One `plookup rpc-server` on 127.0.0.1 (every layer on it; the local CPU keeps the inputs), reached
through examples/delay_proxy.py (a userspace TCP proxy on loopback that delays every forwarded
chunk: this kernel has no sch_netem, so no `tc netem`). Per delay: plain llama_cpp.Llama, then
plookup.Llama (its cost curve measured over that link, in a cache of this run's own), and
plookup.Llama with backend_sampling (greedy rows' argmax in the graph: token ids come back, not
logits), each loaded alone (a server serves one client at a time), greedy on two copy-heavy code
edits of the bench's standard workloads. Reports decode speed, forward passes per token, and the
proxy's chunks and bytes each way per forward pass (round trips of the RPC protocol, as far as one
read is one message).
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import llama_cpp

import plookup
from plookup.api import rpc_check
from plookup.app.bench.llama_server import free_port
from plookup.app.bench.plain import chat_prompt_tokens, first_divergence
from plookup.app.bench.workloads import standard_workloads
from plookup.app.models import resolve_model
from plookup.app.options import plain_llama

ROOT = Path(__file__).resolve().parents[1]

THREADS = 2
SYSTEMS = ("plain", "plookup", "plookup-backend")
KWARGS = dict(n_ctx=4096, n_threads=THREADS, n_threads_batch=THREADS, verbose=False, seed=0)


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


def run(llm, prompts, max_tokens: int, proxy: Proxy) -> dict:
    """Greedy decoding of each prompt: decode time (first token to last), tokens, passes, chunks."""
    out = dict(tokens=0, decode_s=0.0, passes=0, up=0, down=0, up_bytes=0, down_bytes=0, outputs=[])
    for prompt in prompts:
        before = proxy.counts()
        llm.reset()
        stream = llm.generate(prompt, temp=0.0)
        first = next(stream)
        start = time.perf_counter()
        rest = list(itertools.islice(stream, max_tokens - 1))
        out["decode_s"] += time.perf_counter() - start
        after = proxy.counts()
        tokens = [first, *rest]
        out["outputs"].append(tokens)
        out["tokens"] += len(rest)
        stats = getattr(llm, "last_stats", None)
        # A plain decode is one pass a token; plookup's count includes the prompt's prefill pass.
        out["passes"] += (stats.forward_passes - 1) if stats is not None else len(rest)
        for key in ("up", "down", "up_bytes", "down_bytes"):
            out[key] += after[key] - before[key]
    out["tok_s"] = out["tokens"] / out["decode_s"]
    out["passes_per_token"] = out["passes"] / out["tokens"]
    out["chunks_up_per_pass"] = out["up"] / max(1, out["passes"])
    out["chunks_down_per_pass"] = out["down"] / max(1, out["passes"])
    out["kib_down_per_pass"] = out["down_bytes"] / 1024 / max(1, out["passes"])
    return out


def main() -> int:
    model = resolve_model(sys.argv[1] if len(sys.argv) > 1 else "qwen-coder-0.5b:q8_0")
    # Cost curves of this run's own (each link is a proxy port of its own): not in the user's cache.
    os.environ["PLOOKUP_CACHE_DIR"] = tempfile.mkdtemp(prefix="plookup-rpc-delay-")
    delays = [float(d) for d in (sys.argv[2] if len(sys.argv) > 2 else "0,1,5").split(",")]
    max_tokens = int(sys.argv[3]) if len(sys.argv) > 3 else 128
    out_path = sys.argv[4] if len(sys.argv) > 4 and sys.argv[4] != "-" else None
    if len(sys.argv) > 5:
        KWARGS["n_gpu_layers"] = int(sys.argv[5])
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "plookup.app.cli", "rpc-server", "--port", str(port), "--threads", str(THREADS)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    results = dict(model=model, max_tokens=max_tokens, threads=THREADS, n_gpu_layers=KWARGS.get("n_gpu_layers", -1), system_info=llama_cpp.llama_print_system_info().decode(),
                   llama_cpp_python=llama_cpp.__version__, runs=[])
    try:
        rpc_check.wait_for_server(f"127.0.0.1:{port}", 60, alive=lambda: server.poll() is None)
        tokenizer = llama_cpp.Llama(model, vocab_only=True, verbose=False)
        workloads = [w for w in standard_workloads(seed=0) if w.kind == "copy"][:2]
        prompts = [chat_prompt_tokens(tokenizer, w.messages) for w in workloads]
        for delay in delays:
            proxy = Proxy(port, delay)
            try:
                row = dict(delay_ms=delay)
                llm = plain_llama(dict(KWARGS, model_path=model, rpc_servers=[proxy.endpoint]))
                row["plain"] = run(llm, prompts, max_tokens, proxy)
                llm.close()
                start = time.perf_counter()
                llm = plookup.Llama(model, rpc_servers=[proxy.endpoint], **KWARGS)
                row["plookup_load_s"] = time.perf_counter() - start  # the curve measured over the link
                row["cost_curve"] = llm.drafter.policy.cost[:17].tolist()
                row["plookup"] = run(llm, prompts, max_tokens, proxy)
                llm.close()
                # The rows' argmax inside the graph: token ids come back over the link, not logits.
                llm = plookup.Llama(model, rpc_servers=[proxy.endpoint], backend_sampling=True, **KWARGS)
                row["plookup-backend"] = run(llm, prompts, max_tokens, proxy)
                llm.close()
                print(f"{delay:g} ms:", flush=True)
                for system in SYSTEMS:
                    r = row[system]
                    r["divergence"] = [first_divergence(a, b) for a, b in zip(row["plain"]["outputs"], r["outputs"])]
                    r["speedup"] = r["tok_s"] / row["plain"]["tok_s"]
                    print(f"  {system:16s} {r['tok_s']:6.1f} tok/s {r['speedup']:5.2f}x, {r['passes_per_token']:.2f} "
                          f"passes/token, chunks a pass {r['chunks_up_per_pass']:.1f} up {r['chunks_down_per_pass']:.1f} "
                          f"down, {r['kib_down_per_pass']:.0f} KiB down a pass; divergence {r['divergence']}", flush=True)
                for system in SYSTEMS:
                    row[system].pop("outputs")
                results["runs"].append(row)
            finally:
                proxy.close()
    finally:
        server.kill()
        server.wait()
    if out_path:
        with open(out_path, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
