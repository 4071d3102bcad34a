"""Prompt evaluation with plookup's context layout (2 sequences, unified, outputs for n_batch rows)
against llama-server's (1 sequence): the same tokens, the same model, in one process, alternating.

    flock /tmp/plookup-cpu.lock .venv/bin/python docs/lab/probes/context_layout_prompt_ab.py MODEL.gguf 2048 3

(a lab probe of 2026-12-06, kept with the figures BENCHMARKS.md quotes from it; not maintained)."""
import contextlib, sys, time, json
import llama_cpp
from llama_cpp import _internals as internals
M = sys.argv[1]; N = int(sys.argv[2]); reps = int(sys.argv[3])
llm = llama_cpp.Llama(M, n_ctx=32768, n_batch=2048, n_threads=2, n_threads_batch=2, flash_attn=True, verbose=False)
text = open('/work/main/README.md').read() * 4
tokens = llm.tokenize(text.encode())[:N]
base = llm.context_params
def make(plookup):
    p = llama_cpp.llama_context_default_params()
    for name, _ in type(base)._fields_:
        setattr(p, name, getattr(base, name))
    if plookup:
        p.n_seq_max, p.kv_unified, p.n_outputs_max_per_seq = 2, True, 0
    return internals.LlamaContext(model=llm._model, params=p, verbose=False)
def run(ctx):
    batch = internals.LlamaBatch(n_tokens=2048, embd=0, n_seq_max=1)
    llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(ctx.ctx), True)
    t = time.perf_counter()
    for i in range(0, len(tokens), 2048):
        chunk = tokens[i:i+2048]
        batch.set_batch(chunk, n_past=i, logits_all=False)
        ctx.decode(batch)
    return time.perf_counter() - t
llm._ctx.close()
out = []
for r in range(reps):
    for kind in ((False, True) if r % 2 == 0 else (True, False)):
        ctx = make(kind); s = run(ctx); ctx.close()
        out.append(("plookup-layout" if kind else "server-layout", r, round(s, 2))); print(out[-1], flush=True)
