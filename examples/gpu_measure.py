"""plookup on a GPU (or any llama.cpp build): the verify-cost curve and its ceiling, batch
invariance, and plain vs plookup greedy decoding on the benchmark's workloads.

    python examples/gpu_measure.py MODEL.gguf [N_COPY N_FREE MAX_TOKENS [N_GPU_LAYERS [OUT.json]]]

Defaults: 8 copy and 4 free-text workloads of standard_workloads(seed=0), 200 tokens, every layer
on the GPU, gpu.json. For the H200 figures (docs/lab/notebook.md, "On a GPU, once")
llama-cpp-python 0.3.36 was built there with CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90-real -DGGML_CUDA_FA=OFF".
"""
import json
import sys
import time

import llama_cpp  # first: on one CUDA image, numpy imported before it crashed llama.cpp's tokenizer
import numpy as np

import plookup
from plookup.app.bench.plain import chat_prompt_tokens, first_divergence
from plookup.app.bench.workloads import standard_workloads
from plookup.measure.costs import measure_cost_curve, oracle_speedup
from plookup.measure.exactness import probe_invariance
from plookup.measure.speeds import measure_speeds

path = sys.argv[1]
n_copy, n_free, max_tokens = (int(a) for a in (sys.argv[2:5] if len(sys.argv) > 4 else (8, 4, 200)))
gpu = int(sys.argv[5]) if len(sys.argv) > 5 else -1  # n_gpu_layers
kw = dict(n_ctx=4096, n_gpu_layers=gpu, verbose=True, seed=0)  # verbose: llama.cpp's log says where layers went
plain = llama_cpp.Llama(path, **kw)
spec = plookup.Llama(path, **kw)
print("system:", llama_cpp.llama_print_system_info().decode().strip(), flush=True)
out = dict(model=path, n_gpu_layers=gpu, exact=spec.exact)
cost = measure_cost_curve(spec)
best_n, ceiling = oracle_speedup(cost)
out.update(cost=[round(float(c), 3) for c in cost], best_n=best_n, ceiling=ceiling)
print("cost curve", out["cost"], "ceiling %.2fx at n=%d" % (ceiling, best_n), flush=True)
inv = probe_invariance(spec)
out["invariance"] = inv.summary()
print("invariance:", inv.summary(), flush=True)
out["prompt_tps"], out["decode_tps"] = measure_speeds(spec)
print("prompt tok/s %.0f decode tok/s %.1f" % (out["prompt_tps"], out["decode_tps"]), flush=True)

def run(llm, prompt):
    llm.reset()
    t0 = time.perf_counter(); toks = []; first = None
    for t in llm.generate(prompt, temp=0.0, repeat_penalty=1.0):
        if first is None:
            first = time.perf_counter()
        toks.append(t)
        if llama_cpp.llama_vocab_is_eog(llm._model.vocab, t) or len(toks) >= max_tokens:
            break
    end = time.perf_counter()
    return toks, (len(toks) - 1) / max(end - first, 1e-9)

ws = standard_workloads(seed=0)
chosen = ws[:n_copy] + ws[-n_free:]
rows = []
for w in chosen:
    prompt = chat_prompt_tokens(plain, w.messages)
    ref, plain_tps = run(plain, prompt)
    run(spec, prompt)  # warm: first run of the policy on this prompt kind
    got, spec_tps = run(spec, prompt)
    st = spec.last_stats
    row = dict(name=w.name, kind=w.kind, tokens=len(got), plain_tps=round(plain_tps, 1), spec_tps=round(spec_tps, 1),
               ratio=round(spec_tps / plain_tps, 3), passes_per_token=round(st.forward_passes / max(st.generated, 1), 3),
               identical=got == ref, divergence=None if got == ref else first_divergence(ref, got))
    rows.append(row)
    print(json.dumps(row), flush=True)
out["rows"] = rows
for kind in ("copy", "free"):
    r = [x["ratio"] for x in rows if x["kind"] == kind]
    if r:
        g = float(np.exp(np.mean(np.log(r))))
        out[f"{kind}_geomean"] = g
        print(f"{kind}: geomean decode x plain {g:.2f} over {len(r)} workloads", flush=True)
json.dump(out, open(sys.argv[6] if len(sys.argv) > 6 else "gpu.json", "w"), indent=1)
