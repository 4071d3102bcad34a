"""Shared by the examples: one greedy chat request three ways, timed end to end (prefill included).

llama_cpp.Llama is the yardstick; plookup.Llama drafts from the prompt and its own output; with a
prediction it also drafts from the text the caller expects the answer to repeat.
"""

from __future__ import annotations

import os
import sys
import time

import llama_cpp

import plookup


def timed_chat(llm: llama_cpp.Llama, messages: list[dict], max_tokens: int, **extra) -> tuple[dict, float]:
    llm.reset()  # no run reuses another's prefilled prompt
    start = time.perf_counter()
    result = llm.create_chat_completion(messages, max_tokens=max_tokens, temperature=0.0, **extra)
    return result, time.perf_counter() - start


def compare(messages: list[dict], prediction: str, max_tokens: int, n_ctx: int) -> str:
    """Print tokens, seconds and speed-up of each way; return the reply with the prediction.

    The model is the GGUF file named as the script's argument, else the bundled SmolLM2-135M.
    """
    kwargs = dict(n_ctx=n_ctx, n_threads=os.cpu_count(), n_threads_batch=os.cpu_count(), verbose=False)
    path = sys.argv[1] if len(sys.argv) > 1 else plookup.smollm2_path()
    plain, fast = llama_cpp.Llama(path, **kwargs), plookup.Llama(path, **kwargs)
    runs = [
        ("llama_cpp.Llama", *timed_chat(plain, messages, max_tokens)),
        ("plookup.Llama", *timed_chat(fast, messages, max_tokens)),
        ("plookup.Llama + prediction", *timed_chat(fast, messages, max_tokens, prediction=prediction)),
    ]
    baseline = runs[0][2]
    print(f"prompt: {runs[0][1]['usage']['prompt_tokens']} tokens")
    for name, result, seconds in runs:
        usage = result["usage"]
        line = (
            f"{name:28} {usage['completion_tokens']:5d} tokens in {seconds:6.2f} s "
            f"({usage['completion_tokens'] / seconds:6.1f} tok/s, x{baseline / seconds:.2f})"
        )
        if "speculative" in usage:
            line += f", {usage['speculative']['forward_passes']} forward passes"
        if "completion_tokens_details" in usage:
            line += f", {usage['completion_tokens_details']['accepted_prediction_tokens']} prediction tokens accepted"
        print(line)
    replies = [result["choices"][0]["message"]["content"] for _, result, _ in runs]
    for (name, _, _), reply in zip(runs[1:], replies[1:]):
        if reply != replies[0]:
            # Batched and single-token kernels round differently: a near-tie may go the other way.
            same = next(i for i, (a, b) in enumerate(zip(reply + "\0", replies[0] + "\0")) if a != b)
            print(f"{name} differs from llama_cpp.Llama after {same} identical characters")
    return replies[-1]
