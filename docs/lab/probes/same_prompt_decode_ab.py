"""Same prompt, same speed? plookup serve without drafting (speculative.n_max 0) against llama-server,
alternating, each freshly started with llama.vim's flags (both at their own -fa default): a
1,515-token code prompt on /completion, 128 greedy tokens, sent twice (the second finds its
prompt cached, so it times decoding alone). Prints each server's timings; from a checkout:

    flock /tmp/plookup-cpu.lock .venv/bin/python docs/lab/probes/same_prompt_decode_ab.py MODEL.gguf LLAMA_SERVER OUT.json

(a lab probe of 2026-12-07, kept with the figures BENCHMARKS.md quotes from it; not maintained)."""
import json, subprocess, sys, urllib.request
from benchmarks.editors.llama_vim import release_files
from plookup.app.bench.local_server import free_port, stop, wait_healthy

MODEL, LLAMA, OUT = sys.argv[1:4]
FLAGS = ["-ub", "1024", "-b", "1024", "-c", "8192", "--cache-reuse", "256", "-t", "2", "-tb", "2"]
files = release_files()
text = max((t for f in files.values() for t in f.values()), key=len)
prompt = text[:7000]

def start(kind, port):
    if kind == "llama-server":
        argv = [LLAMA, "-m", MODEL, "--port", str(port), "--host", "127.0.0.1", *FLAGS]
    else:
        argv = [sys.executable, "-m", "plookup.app.cli", "serve", "-m", MODEL, "--port", str(port), "--host", "127.0.0.1", *FLAGS]
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:  # (n_max 0: no measured figures needed, a 200 from /health is enough)
        wait_healthy(p, f"http://127.0.0.1:{port}", kind, 300)
    except RuntimeError:
        stop(p, 30)
        raise
    return p

def post(port, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/completion", json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())

results = []
for rnd in range(4):
    order = ["llama-server", "plookup plain"] if rnd % 2 == 0 else ["plookup plain", "llama-server"]
    for kind in order:
        port = free_port()
        p = start(kind, port)
        try:
            body = {"prompt": prompt, "n_predict": 128, "temperature": 0, "cache_prompt": True, "ignore_eos": True}
            if kind != "llama-server":
                body["speculative"] = {"n_max": 0}
            post(port, {"prompt": "def f():", "n_predict": 4, "temperature": 0})  # warm-up
            a = post(port, body)["timings"]
            b = post(port, body)["timings"]
        finally:
            stop(p, 30)
        row = dict(round=rnd, system=kind, prompt_n=a["prompt_n"], prompt_ms_tok=round(a["prompt_per_token_ms"], 2),
                   decode_ms_tok=round(a["predicted_per_token_ms"], 2), decode2_ms_tok=round(b["predicted_per_token_ms"], 2),
                   prompt2_n=b["prompt_n"])
        print(json.dumps(row), flush=True)
        results.append(row)
json.dump(results, open(OUT, "w"), indent=1)
