"""plookup in one minute: the same code edit with plain llama.cpp decoding and with plookup.

Runs on the bundled SmolLM2-135M model: asks it to rename a variable in a real standard-library
function, prints plookup's answer, then both runs' speed side by side.
"""

import os
import random
import time

import llama_cpp

import plookup
from plookup.workloads import code_edit

THREADS = os.cpu_count()


def timed_chat(llm, messages):
    start = time.perf_counter()
    result = llm.create_chat_completion(messages, max_tokens=400, temperature=0.0)
    return result, time.perf_counter() - start


def main():
    model = plookup.smollm2_path()
    settings = dict(n_ctx=4096, n_threads=THREADS, n_threads_batch=THREADS, verbose=False)
    print("loading the model twice: plain llama_cpp.Llama and plookup.Llama ...", flush=True)
    plain = llama_cpp.Llama(model, **settings)
    fast = plookup.Llama(model, **settings)  # measures this machine's verify costs once, cached

    messages = code_edit("textwrap", "dedent", "rename", random.Random(0)).messages
    print("\n--- request ---\n" + messages[0]["content"][:300] + " ...\n")
    plain_result, plain_s = timed_chat(plain, messages)
    fast_result, fast_s = timed_chat(fast, messages)

    text = fast_result["choices"][0]["message"]["content"]
    print("--- plookup's answer ---\n" + text + "\n")
    same = text == plain_result["choices"][0]["message"]["content"]
    spec = fast_result["usage"]["speculative"]
    n_plain = plain_result["usage"]["completion_tokens"]
    n_fast = fast_result["usage"]["completion_tokens"]
    print(f"plain  : {n_plain} tokens in {plain_s:.2f}s ({n_plain / plain_s:.1f} tok/s)")
    print(f"plookup: {n_fast} tokens in {fast_s:.2f}s ({n_fast / fast_s:.1f} tok/s), "
          f"{(n_fast / fast_s) / (n_plain / plain_s):.2f}x plain")
    print(f"         drafted {spec['drafted']}, accepted {spec['accepted']}, "
          f"{spec['forward_passes'] / max(1, spec['generated']):.2f} forward passes per token")
    print("same text as plain decoding" if same else
          "text differs from plain decoding: llama.cpp's batched kernels round differently and may\n"
          "pick the other of two near-equal tokens; `plookup bench` reports the logit gap there")


if __name__ == "__main__":
    main()
